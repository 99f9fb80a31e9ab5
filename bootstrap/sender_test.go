package bootstrap_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// The sender may open a connection for every delivery a worker may have in
// flight, all of which can be to one endpoint.
func TestSenderAllowsAConnectionPerDeliveryInFlight(t *testing.T) {
	for _, concurrency := range []int{1, bootstrap.DefaultConcurrency, 5000} {
		cfg := bootstrap.DefaultConfig()
		cfg.WorkerConcurrency = concurrency
		assert.Equal(t, concurrency, bootstrap.SenderOptions(cfg).MaxConnsPerHost)
	}
}

// DISPATCH_OUTBOUND_PROXY (or --outbound-proxy) reaches the sender; a value
// that is not an http:// or socks5:// proxy stops startup with an error
// naming the setting, and neither that error nor the printed
// configuration shows the password.
func TestOutboundProxyConfig(t *testing.T) {
	const env = "DISPATCH_OUTBOUND_PROXY"
	cfg, err := parseConfig(t, env, "")
	require.NoError(t, err)
	assert.True(t, bootstrap.SenderOptions(cfg).Proxy.IsZero(), "none: deliveries connect directly")

	cfg, err = parseConfig(t, env, "http://egress:hunter2@10.0.0.1:3128")
	require.NoError(t, err)
	assert.Equal(t, "http://egress:xxxxx@10.0.0.1:3128", bootstrap.SenderOptions(cfg).Proxy.String())
	assert.NotContains(t, fmt.Sprintf("%+v", cfg), "hunter2")

	cfg, err = parseConfig(t, env, "http://10.0.0.1:3128", "--outbound-proxy", "socks5://10.0.0.2:1080")
	require.NoError(t, err)
	assert.Equal(t, "socks5://10.0.0.2:1080", bootstrap.SenderOptions(cfg).Proxy.String(), "the flag wins")

	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"https://egress:hunter2@10.0.0.1:3128", nil, `scheme "https" is not supported`},
		{"socks5h://egress:hunter2@proxy:1080", nil, `scheme "socks5h" is not supported`},
		{"http://egress:hunter2@10.0.0.1", nil, "no port"},
		{"", []string{"--outbound-proxy", "ftp://egress:hunter2@10.0.0.1:21"}, `scheme "ftp" is not supported`},
	} {
		_, err := parseConfig(t, env, tc.env, tc.args...)
		if assert.Error(t, err, tc.env, tc.args) {
			assert.Contains(t, err.Error(), "outbound-proxy ($DISPATCH_OUTBOUND_PROXY): "+tc.want)
			assert.NotContains(t, err.Error(), "hunter2")
		}
	}
}

// DISPATCH_ATTEMPT_BODY_BYTES reaches the sender: 0 keeps none (the
// sender's negative), and more than the sender can keep is refused.
func TestAttemptBodyBytesConfig(t *testing.T) {
	testSetting(t, "DISPATCH_ATTEMPT_BODY_BYTES", func(c bootstrap.Config) int { return bootstrap.SenderOptions(c).KeepBody }, []settingCase[int]{
		{"4096", nil, 4096},
		{"0", nil, -1},
		{"65536", nil, 65536},
		{"100", []string{"--attempt-body-bytes", "10"}, 10},
	}, map[string]string{
		"-1":    "attempt-body-bytes must be 0..65536, got -1",
		"65537": "attempt-body-bytes must be 0..65536, got 65537",
		"4k":    "$DISPATCH_ATTEMPT_BODY_BYTES",
	})
	assert.Equal(t, 4096, bootstrap.DefaultConfig().AttemptBodyBytes)
}
