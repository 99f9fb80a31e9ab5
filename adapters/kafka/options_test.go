package kafka_test

import (
	"strings"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/kafka"
)

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts kafka.Options
		want string
	}{
		"valid":         {kafka.Options{Brokers: []string{"k1:9092"}, Prefix: "prod.eu-1_a"}, ""},
		"no broker":     {kafka.Options{}, "at least one broker"},
		"empty broker":  {kafka.Options{Brokers: []string{"k1:9092", " "}}, "empty broker address"},
		"negative":      {kafka.Options{Brokers: []string{"k1:9092"}, Partitions: -1}, "partitions must be at least 1, got -1"},
		"prefix spaces": {kafka.Options{Brokers: []string{"k1:9092"}, Prefix: "my app"}, `prefix "my app" may hold only`},
	} {
		err := tc.opts.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
		if _, err := kafka.New(tc.opts); err == nil {
			t.Errorf("%s: New accepted invalid options", name)
		}
	}
}
