package bootstrap_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// parseConfig sets the environment variable name to env for the test, then
// parses args over the defaults as the binary does and validates the result.
func parseConfig(t *testing.T, name, env string, args ...string) (bootstrap.Config, error) {
	t.Setenv(name, env)
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func TestFanOutMaxUnreadConfig(t *testing.T) {
	parse := func(env string, args ...string) (bootstrap.Config, error) {
		return parseConfig(t, "DISPATCH_FANOUT_MAX_UNREAD", env, args...)
	}

	if got := bootstrap.DefaultConfig().FanOutMaxUnread; got != application.DefaultFanOutMaxUnread {
		t.Errorf("default = %d, want %d", got, application.DefaultFanOutMaxUnread)
	}
	for _, tc := range []struct {
		env  string
		args []string
		want int64
	}{
		{"0", nil, 0},
		{"20000", nil, 20000},
		{"20000", []string{"--fanout-max-unread", "500"}, 500},
	} {
		if cfg, err := parse(tc.env, tc.args...); err != nil || cfg.FanOutMaxUnread != tc.want {
			t.Errorf("env %q, args %q: %d, %v; want %d", tc.env, tc.args, cfg.FanOutMaxUnread, err, tc.want)
		}
	}
	for _, tc := range []struct{ env, want string }{
		{"-1", "fanout-max-unread must be at least 0, got -1"},
		{"many", "$DISPATCH_FANOUT_MAX_UNREAD"},
	} {
		if _, err := parse(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DISPATCH_FANOUT_MAX_UNREAD=%q: error %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
}

// settingCase is a value of a setting's variable, flags given after it,
// and what the setting must then be.
type settingCase[T comparable] struct {
	env  string
	args []string
	want T
}

// testSetting checks a setting read from the variable env and from flags:
// every case parses to its value, and every refused value fails with an
// error containing what refused gives for it.
func testSetting[T comparable](t *testing.T, env string, get func(bootstrap.Config) T, cases []settingCase[T], refused map[string]string) {
	t.Helper()
	for _, tc := range cases {
		if cfg, err := parseConfig(t, env, tc.env, tc.args...); err != nil || get(cfg) != tc.want {
			t.Errorf("%s=%q, args %q: %v, %v; want %v", env, tc.env, tc.args, get(cfg), err, tc.want)
		}
	}
	for value, want := range refused {
		if _, err := parseConfig(t, env, value); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%q: error %v, want it to contain %q", env, value, err, want)
		}
	}
}

func TestMaxBodyBytesConfig(t *testing.T) {
	if got := bootstrap.DefaultConfig().MaxBodyBytes; got != 1<<20 {
		t.Errorf("default = %d, want 1048576", got)
	}
	testSetting(t, "DISPATCH_MAX_BODY_BYTES", func(c bootstrap.Config) int64 { return c.MaxBodyBytes }, []settingCase[int64]{
		{"4096", nil, 4096},
		{"4096", []string{"--max-body-bytes", "2048"}, 2048},
	}, map[string]string{
		"100":  "max-body-bytes must be at least 1024, got 100",
		"lots": "$DISPATCH_MAX_BODY_BYTES",
	})
}

func TestRequestTimeoutConfig(t *testing.T) {
	if got := bootstrap.DefaultConfig().RequestTimeout; got != 30*time.Second {
		t.Errorf("default = %s, want 30s", got)
	}
	testSetting(t, "DISPATCH_REQUEST_TIMEOUT", func(c bootstrap.Config) time.Duration { return c.RequestTimeout }, []settingCase[time.Duration]{
		{"5s", nil, 5 * time.Second},
		{"5s", []string{"--request-timeout", "1m"}, time.Minute},
	}, map[string]string{
		"0":     "request-timeout must be at least 10ms, got 0s",
		"-1s":   "request-timeout must be at least 10ms, got -1s",
		"later": "$DISPATCH_REQUEST_TIMEOUT",
	})
}

func TestRetentionConfig(t *testing.T) {
	if got := bootstrap.DefaultConfig().Retention; got != 720*time.Hour {
		t.Errorf("default = %s, want 720h", got)
	}
	testSetting(t, "DISPATCH_RETENTION", func(c bootstrap.Config) time.Duration { return c.Retention }, []settingCase[time.Duration]{
		{"1m", nil, time.Minute},
		{"168h", []string{"--retention", "24h"}, 24 * time.Hour},
	}, map[string]string{
		"59s":     "retention must be at least 1m, got 59s",
		"0":       "retention must be at least 1m, got 0s",
		"forever": "$DISPATCH_RETENTION",
	})
}

// An API key shorter than 32 characters stops every role, naming the
// setting, the key's place and length, and never the key.
func TestShortAPIKeysAreRefused(t *testing.T) {
	long := strings.Repeat("a", bootstrap.MinAPIKeyLength)
	testSetting(t, "DISPATCH_API_KEYS", func(c bootstrap.Config) string { return strings.Join(c.APIKeys, ",") }, []settingCase[string]{
		{long, nil, long},
		{long + "," + long + "b", nil, long + "," + long + "b"},
	}, map[string]string{
		"change-me":                          "api-keys: key 1 of 1 is 9 characters long, want at least 32 ($DISPATCH_API_KEYS)",
		long + ",secret-but-short":           "api-keys: key 2 of 2 is 16 characters long, want at least 32",
		strings.Repeat("b", 31) + "," + long: "key 1 of 2 is 31 characters long",
	})
	for _, role := range []bootstrap.Role{bootstrap.RoleAPI, bootstrap.RoleAll} {
		cfg := bootstrap.DefaultConfig()
		cfg.APIKeys = []string{"hunter2-hunter2"}
		_, err := bootstrap.Options(role, cfg)
		if err == nil || !strings.Contains(err.Error(), "api-keys") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("role %s with a 15-character key: error %v, want one naming api-keys and not the key", role, err)
		}
	}
}

// The key `dispatch dev` makes passes the check every role makes.
func TestDevKeyIsLongEnough(t *testing.T) {
	cfg := bootstrap.DefaultConfig()
	cfg.APIKeys = []string{bootstrap.DevKey()}
	if err := cfg.Validate(); err != nil {
		t.Errorf("dev key %d characters: %v", len(cfg.APIKeys[0]), err)
	}
}

func TestQueueConfig(t *testing.T) {
	cfg := bootstrap.DefaultConfig()
	if cfg.Queue != "redis" || cfg.QueuePartitions != 16 || cfg.QueuePrefix != "dispatch" ||
		cfg.NATSURL != "nats://127.0.0.1:4222" || strings.Join(cfg.KafkaBrokers, ",") != "127.0.0.1:9092" || cfg.RedisCluster {
		t.Errorf("queue defaults %q %d %q %q %q %v, want SPEC §7's", cfg.Queue, cfg.QueuePartitions, cfg.QueuePrefix, cfg.NATSURL, cfg.KafkaBrokers, cfg.RedisCluster)
	}
	t.Run("queue", func(t *testing.T) {
		testSetting(t, "DISPATCH_QUEUE", func(c bootstrap.Config) string { return c.Queue }, []settingCase[string]{
			{"redis", nil, "redis"},
			{"nats", nil, "nats"},
			{"kafka", nil, "kafka"},
		}, map[string]string{
			"rabbitmq": `queue must be one of redis, nats, kafka`,
			"":         `got ""`,
		})
	})
	t.Run("partitions", func(t *testing.T) {
		testSetting(t, "DISPATCH_QUEUE_PARTITIONS", func(c bootstrap.Config) int { return c.QueuePartitions }, []settingCase[int]{
			{"1", nil, 1},
			{"64", []string{"--queue-partitions", "32"}, 32},
		}, map[string]string{
			"0":    "queue-partitions must be 1..1024, got 0",
			"2000": "queue-partitions must be 1..1024, got 2000",
			"many": "$DISPATCH_QUEUE_PARTITIONS",
		})
	})
	t.Run("prefix", func(t *testing.T) {
		testSetting(t, "DISPATCH_QUEUE_PREFIX", func(c bootstrap.Config) string { return c.QueuePrefix }, []settingCase[string]{
			{"staging", nil, "staging"},
		}, map[string]string{"": "queue-prefix must be set", "a{b}": "queue-prefix must not contain '{' or '}'"})
		// NATS takes the prefix as a stream name and subject token.
		if _, err := parseConfig(t, "DISPATCH_QUEUE_PREFIX", "team.a", "--queue", "nats"); err == nil || !strings.Contains(err.Error(), `queue-prefix: nats queue: prefix must be letters, digits, '-' and '_'`) {
			t.Errorf(`nats queue with prefix "team.a": error %v, want one naming queue-prefix`, err)
		}
		if _, err := parseConfig(t, "DISPATCH_QUEUE_PREFIX", "team_a-1", "--queue", "nats"); err != nil {
			t.Errorf(`nats queue with prefix "team_a-1": %v`, err)
		}
	})
	t.Run("kafka settings", func(t *testing.T) {
		for brokers, want := range map[string]string{
			"":                "kafka-brokers must be set for the kafka queue",
			"k1:9092,k2":      `kafka-brokers must be host:port, got "k2"`,
			"k1:9092,[::1]:":  `kafka-brokers must be host:port, got "[::1]:"`,
			"k1:9092,k2:9093": "",
		} {
			cfg := bootstrap.DefaultConfig()
			cfg.Queue = "kafka"
			cfg.KafkaBrokers = strings.FieldsFunc(brokers, func(r rune) bool { return r == ',' })
			err := cfg.Validate()
			if want == "" {
				if err != nil && strings.Contains(err.Error(), "kafka") {
					t.Errorf("brokers %q: %v", brokers, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("brokers %q: error %v, want one containing %q", brokers, err, want)
			}
		}
		cfg := bootstrap.DefaultConfig()
		cfg.Queue, cfg.QueuePrefix = "kafka", "my deployment"
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `queue-prefix must be letters, digits, '.', '_' and '-' for the kafka queue, got "my deployment"`) {
			t.Errorf("prefix with a space: %v", err)
		}
	})
	t.Run("kafka", func(t *testing.T) {
		testSetting(t, "KAFKA_BROKERS", func(c bootstrap.Config) string { return strings.Join(c.KafkaBrokers, ",") }, []settingCase[string]{
			{"k1:9092,k2:9092", nil, "k1:9092,k2:9092"},
		}, nil)
	})
	t.Run("nats", func(t *testing.T) {
		testSetting(t, "NATS_URL", func(c bootstrap.Config) string { return c.NATSURL }, []settingCase[string]{
			{"nats://n1:4222", nil, "nats://n1:4222"},
		}, nil)
	})
}
