// Package fetch is the one HTTP client ingestq uses to reach depositors'
// servers and callbacks. URLs come from depositors, so every request is
// checked against a Policy: allowed schemes, and a deny list of addresses
// checked on the address actually dialled (after DNS, at connect time, and
// again for every redirect), so neither a redirect nor DNS rebinding reaches
// a cloud metadata service or any other denied range.
package fetch

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Policy says what a Client may reach. The zero Policy is usable: every
// zero field takes its default.
type Policy struct {
	// Schemes allowed (lower case); default http and https.
	Schemes []string
	// Deny adds ranges to the built-in deny list, which always applies:
	// link-local 169.254.0.0/16 (cloud metadata) and fe80::/10, 0.0.0.0/8,
	// ::/128, multicast, broadcast and the IPv6 metadata address
	// fd00:ec2::254. Loopback and private ranges are allowed unless listed
	// here (see ParseDeny). Invalid (zero) prefixes are skipped.
	Deny []netip.Prefix
	// MaxRedirects followed per request; default 5, negative for none.
	MaxRedirects int
	// ConnectTimeout bounds a TCP connect and a TLS handshake; default 10s.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for response headers once the request
	// is sent; default 30s.
	HeaderTimeout time.Duration
	// IdleTimeout bounds one wait for body bytes: a body read that gets no
	// data for this long fails; default 60s.
	IdleTimeout time.Duration
	// FetchTimeout bounds a whole Fetch call, so a server that trickles a
	// small document byte by byte is cut off too; default 5m.
	FetchTimeout time.Duration
}

// Defaults of Policy's zero fields.
const (
	DefaultMaxRedirects   = 5
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultFetchTimeout   = 5 * time.Minute
)

// Sentinel errors; test with errors.Is. Every error also names the URL.
var (
	// ErrDenied: the URL's address, or one it resolved or redirected to,
	// is in the deny list.
	ErrDenied = errors.New("address denied by policy")
	// ErrScheme: the URL's scheme is not allowed by the policy.
	ErrScheme = errors.New("scheme not allowed")
	// ErrTooLarge: a body is larger than the caller allows.
	ErrTooLarge = errors.New("body too large")
	// ErrTimeout: a connect, response-header, idle or whole-fetch timeout
	// ran out.
	ErrTimeout = errors.New("timed out")
)

// withDefaults fills the zero fields and adds the built-in deny list.
func (p Policy) withDefaults() Policy {
	if len(p.Schemes) == 0 {
		p.Schemes = []string{"http", "https"}
	} else {
		schemes := make([]string, len(p.Schemes))
		for i, s := range p.Schemes {
			schemes[i] = strings.ToLower(s)
		}
		p.Schemes = schemes
	}
	deny := builtinDeny()
	for _, d := range p.Deny {
		if d.IsValid() {
			deny = append(deny, d.Masked())
		}
	}
	p.Deny = deny
	if p.MaxRedirects == 0 {
		p.MaxRedirects = DefaultMaxRedirects
	}
	if p.MaxRedirects < 0 {
		p.MaxRedirects = 0
	}
	p.ConnectTimeout = orDefault(p.ConnectTimeout, DefaultConnectTimeout)
	p.HeaderTimeout = orDefault(p.HeaderTimeout, DefaultHeaderTimeout)
	p.IdleTimeout = orDefault(p.IdleTimeout, DefaultIdleTimeout)
	p.FetchTimeout = orDefault(p.FetchTimeout, DefaultFetchTimeout)
	return p
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// builtinDeny is denied whatever the policy says.
func builtinDeny() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata
		netip.MustParsePrefix("fe80::/10"),      // link-local
		netip.MustParsePrefix("0.0.0.0/8"),      // "this network": 0.0.0.0 reaches local services
		netip.MustParsePrefix("::/128"),         // unspecified
		netip.MustParsePrefix("224.0.0.0/4"),    // multicast
		netip.MustParsePrefix("ff00::/8"),       // multicast
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("fd00:ec2::254/128"), // cloud metadata over IPv6
	}
}

// namedRanges are the words ParseDeny knows.
func namedRanges(word string) []netip.Prefix {
	var cidrs []string
	switch word {
	case "loopback":
		cidrs = []string{"127.0.0.0/8", "::1/128"}
	case "private":
		cidrs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}
	case "link-local":
		cidrs = []string{"169.254.0.0/16", "fe80::/10"}
	}
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

// ParseDeny reads a deny list: comma-separated CIDRs ("10.1.0.0/16"),
// addresses ("10.1.2.3") or the words "loopback", "private" and
// "link-local". An empty list is nil.
func ParseDeny(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if named := namedRanges(strings.ToLower(item)); len(named) > 0 {
			out = append(out, named...)
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(item); err == nil {
			out = append(out, netip.PrefixFrom(a.WithZone(""), a.BitLen()))
			continue
		}
		return nil, fmt.Errorf("fetch: deny list item %q is not a CIDR, an address, or one of loopback, private, link-local", item)
	}
	return out, nil
}

// deniedBy returns the deny-list range that holds addr, if any. An IPv4
// address is checked in both its forms (1.2.3.4 and ::ffff:1.2.3.4), and the
// IPv4 address inside a NAT64 address (64:ff9b::/96) too, so no spelling of
// a denied address slips through.
func deniedBy(addr netip.Addr, deny []netip.Prefix) (netip.Prefix, bool) {
	addr = addr.WithZone("") // a zoned address never matches a prefix
	forms := []netip.Addr{addr.Unmap()}
	if v4 := addr.Unmap(); v4.Is4() {
		forms = append(forms, netip.AddrFrom16(v4.As16()))
	}
	if nat64 := netip.MustParsePrefix("64:ff9b::/96"); nat64.Contains(addr) {
		b := addr.As16()
		forms = append(forms, netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, p := range deny {
		for _, a := range forms {
			if p.Contains(a) {
				return p, true
			}
		}
	}
	return netip.Prefix{}, false
}

// CheckURL parses raw and checks it against p: an allowed scheme, a host,
// and, when the host is an IP address, not a denied one. Host names are
// checked when they resolve, on the address dialled.
func CheckURL(raw string, p Policy) (*url.URL, error) {
	return checkURL(raw, p.withDefaults())
}

func checkURL(raw string, p Policy) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("fetch: %q is not a URL: %w", raw, err)
	}
	if err := checkTarget(u, p); err != nil {
		return nil, fmt.Errorf("fetch: %s: %w", u.Redacted(), err)
	}
	return u, nil
}

// checkTarget says why u may not be requested; the caller names u.
func checkTarget(u *url.URL, p Policy) error {
	if !slices.Contains(p.Schemes, strings.ToLower(u.Scheme)) {
		return fmt.Errorf("%w: %q (allowed: %s)", ErrScheme, u.Scheme, strings.Join(p.Schemes, ", "))
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("the URL has no host")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if prefix, denied := deniedBy(addr, p.Deny); denied {
			return fmt.Errorf("%w: %s is in %s", ErrDenied, addr, prefix)
		}
	}
	return nil
}
