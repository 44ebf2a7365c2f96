package fetch_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/fetch"
)

// policyFrom reads the callback address settings from env as a service
// would, and returns the policy they make.
func policyFrom(t *testing.T, env map[string]string) (fetch.Policy, error) {
	t.Helper()
	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	r := config.New(flags, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	s := fetch.RegisterAddressSettings(r, "callback", "callbacks")
	if err := r.Parse(nil); err != nil {
		return fetch.Policy{}, err
	}
	return s.Apply(fetch.Policy{}), nil
}

func TestAddressSettingsDenyInternalAddressesUnlessTheirVariableAllowsThem(t *testing.T) {
	p, err := policyFrom(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch.CheckURL("http://127.0.0.1:8080/cb", p); !errors.Is(err, fetch.ErrDenied) ||
		!strings.HasSuffix(err.Error(), "(INGESTQ_CALLBACK_ALLOW=127.0.0.0/8 allows it)") {
		t.Errorf("loopback under the defaults: %v, want a denial naming INGESTQ_CALLBACK_ALLOW", err)
	}
	p, err = policyFrom(t, map[string]string{"INGESTQ_CALLBACK_ALLOW": "loopback", "INGESTQ_CALLBACK_DENY": "127.0.0.9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch.CheckURL("http://127.0.0.1:8080/cb", p); err != nil {
		t.Errorf("loopback allowed: %v", err)
	}
	if _, err := fetch.CheckURL("http://127.0.0.9:8080/cb", p); !errors.Is(err, fetch.ErrDenied) {
		t.Errorf("an allowed range's address that is denied: %v, want ErrDenied", err)
	}
	for _, bad := range []struct{ env, value, want string }{
		{"INGESTQ_CALLBACK_ALLOW", "link-local", "INGESTQ_CALLBACK_ALLOW: fetch: allow list item 169.254.0.0/16 is in 169.254.0.0/16, which is always denied"},
		{"INGESTQ_CALLBACK_DENY", "intranet", `INGESTQ_CALLBACK_DENY: fetch: deny list item "intranet" is not a CIDR`},
	} {
		if _, err := policyFrom(t, map[string]string{bad.env: bad.value}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s=%s: %v, want %q", bad.env, bad.value, err, bad.want)
		}
	}
}
