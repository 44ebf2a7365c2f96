package fetch

import (
	"net/netip"
	"strings"

	"github.com/ingestq/ingestq/shared/config"
)

// AddressSettings are a service's settings of the addresses its requests
// may reach: -<name>-deny and -<name>-allow, INGESTQ_<NAME>_DENY and
// INGESTQ_<NAME>_ALLOW. A list that does not parse is refused at start,
// naming its variable.
type AddressSettings struct {
	allowEnv    string
	deny, allow []netip.Prefix
}

// RegisterAddressSettings defines the settings on r; name is "fetch" or
// "callback", what says which requests they judge ("payload and manifest
// URLs").
func RegisterAddressSettings(r *config.Registry, name, what string) *AddressSettings {
	env := "INGESTQ_" + strings.ToUpper(name)
	s := &AddressSettings{allowEnv: env + "_ALLOW"}
	r.Func(name+"-deny", env+"_DENY", "",
		"addresses "+what+" must not reach, beside the internal ranges and the built-in list (link-local, multicast, cloud metadata): comma-separated CIDRs, addresses or loopback, private, link-local",
		func(v string) (err error) {
			s.deny, err = ParseDeny(v)
			return err
		})
	r.Func(name+"-allow", s.allowEnv, "",
		"internal addresses "+what+" may reach, denied unless listed here (loopback 127.0.0.0/8 ::1; private 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7 100.64.0.0/10): comma-separated CIDRs, addresses or loopback, private",
		func(v string) (err error) {
			s.allow, err = ParseAllow(v)
			return err
		})
	return s
}

// Apply returns p with the settings' address lists.
func (s *AddressSettings) Apply(p Policy) Policy {
	p.Deny, p.Allow, p.AllowSetting = s.deny, s.allow, s.allowEnv
	return p
}
