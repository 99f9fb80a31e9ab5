package bootstrap_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

const steady = "schedtrace=2147483647"

func TestSteadySysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=" + steady}, true},
		{"nothing at all", nil, []string{"GODEBUG=" + steady}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "B=2"}, []string{"GODEBUG=" + steady, "B=2"}, true},
		{"other settings kept", []string{"GODEBUG=http2client=0,gctrace=1"}, []string{"GODEBUG=http2client=0,gctrace=1," + steady}, true},
		{"schedtrace already set", []string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{"schedtrace among others", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, []string{"GODEBUG=gctrace=1,schedtrace=1000"}, false},
		{"a longer key is not schedtrace", []string{"GODEBUG=xschedtrace=1"}, []string{"GODEBUG=xschedtrace=1," + steady}, true},
		{"a variable whose name ends in GODEBUG is not GODEBUG", []string{"NOTGODEBUG=schedtrace=0"}, []string{"NOTGODEBUG=schedtrace=0", "GODEBUG=" + steady}, true},
		{"the first GODEBUG counts, as for the runtime", []string{"GODEBUG=a=1", "GODEBUG=schedtrace=0"}, []string{"GODEBUG=a=1," + steady, "GODEBUG=schedtrace=0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.environ)
			got, changed := bootstrap.SteadySysmonEnv(in)
			if changed != tc.changed || !slices.Equal(got, tc.want) {
				t.Errorf("steadySysmonEnv(%q) = %q, %v; want %q, %v", tc.environ, got, changed, tc.want, tc.changed)
			}
			if !slices.Equal(in, tc.environ) {
				t.Errorf("the caller's environ changed to %q", in)
			}
		})
	}
}

// sysmonChild makes TestMain run SteadySysmon and print GODEBUG instead
// of the tests.
const sysmonChild = "DISPATCH_TEST_SYSMON_CHILD"

func runSysmonChild() {
	bootstrap.SteadySysmon()
	os.Stdout.WriteString(os.Getenv("GODEBUG"))
	os.Exit(0)
}

func TestSteadySysmonReexecutes(t *testing.T) {
	for _, tc := range []struct{ godebug, want string }{
		{"", steady},
		{"gctrace=0", "gctrace=0," + steady},
		{"schedtrace=0", "schedtrace=0"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(withoutGODEBUG(os.Environ()), sysmonChild+"=1", "GODEBUG="+tc.godebug)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GODEBUG=%q: %v", tc.godebug, err)
		}
		if got := string(out); got != tc.want {
			t.Errorf("GODEBUG=%q: the program ran with GODEBUG=%q, want %q", tc.godebug, got, tc.want)
		}
	}
}

func withoutGODEBUG(environ []string) []string {
	return slices.DeleteFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
}
