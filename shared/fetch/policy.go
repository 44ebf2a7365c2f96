// Package fetch is the one HTTP client ingestq uses to reach depositors'
// servers and callbacks. URLs come from depositors, so every request is
// checked against a Policy: allowed schemes, and denied addresses checked
// on the address actually dialled (after DNS, at connect time, and again
// for every redirect), so neither a redirect nor DNS rebinding reaches a
// cloud metadata service or the deployment's own network. A body must keep
// arriving, and at a least rate, so a slow server cannot hold a worker for
// ever.
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
	// fd00:ec2::254 (see ParseDeny). Invalid (zero) prefixes are skipped.
	Deny []netip.Prefix
	// Allow lifts ranges out of the internal ranges, which are denied
	// unless allowed here (InternalRanges: loopback, private, shared
	// address space): a deployment whose depositors serve files from its
	// own network, or a test server on loopback. It lifts nothing out of
	// the built-in list or Deny (see ParseAllow).
	Allow []netip.Prefix
	// AllowSetting is what the error of a URL in an internal range names
	// as allowing it: a service's setting, "INGESTQ_FETCH_ALLOW"; default
	// "Policy.Allow".
	AllowSetting string
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
	// MinRate is the least rate, in bytes per second, at which a body must
	// arrive: averaged over each RateWindow spent waiting for it, a body
	// slower than this fails with ErrTooSlow. A transfer of any size is so
	// bounded (size/MinRate plus a window), however it trickles. Default
	// 1024; negative for no least rate.
	MinRate int64
	// StatusBody bounds how much of a refusal's body a StatusError keeps;
	// default MaxStatusBody. A service that says at length why it refused
	// (a stack trace before the reason) needs more.
	StatusBody int64
	// RateWindow is the time over which MinRate is measured; the first
	// window is also the grace a transfer gets to get going. Only time
	// spent waiting for data counts, so a caller slow to read is not cut
	// off. Default 30s.
	RateWindow time.Duration
}

// Defaults of Policy's zero fields.
const (
	DefaultMaxRedirects   = 5
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultFetchTimeout   = 5 * time.Minute
	DefaultMinRate        = 1024
	DefaultRateWindow     = 30 * time.Second
)

// Sentinel errors; test with errors.Is. Every error also names the URL.
var (
	// ErrDenied: the URL's address, or one it resolved or redirected to,
	// is denied: in the built-in list, in Deny, or in an internal range
	// that Allow does not lift.
	ErrDenied = errors.New("address denied by policy")
	// ErrScheme: the URL's scheme is not allowed by the policy.
	ErrScheme = errors.New("scheme not allowed")
	// ErrTooLarge: a body is larger than the caller allows.
	ErrTooLarge = errors.New("body too large")
	// ErrTimeout: a connect, response-header, idle or whole-fetch timeout
	// ran out.
	ErrTimeout = errors.New("timed out")
	// ErrTooSlow: a body arrived slower than the MinRate.
	ErrTooSlow = errors.New("too slow")
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
	allow := make([]netip.Prefix, 0, len(p.Allow))
	for _, a := range p.Allow {
		if a.IsValid() {
			allow = append(allow, a.Masked())
		}
	}
	p.Allow = allow
	if p.AllowSetting == "" {
		p.AllowSetting = "Policy.Allow"
	}
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
	p.RateWindow = orDefault(p.RateWindow, DefaultRateWindow)
	if p.StatusBody <= 0 {
		p.StatusBody = MaxStatusBody
	}
	if p.MinRate == 0 {
		p.MinRate = DefaultMinRate
	}
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

// InternalRanges are the ranges of a deployment's own network, denied
// unless a Policy's Allow lifts them: loopback (127.0.0.0/8, ::1), private
// (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) and the shared
// address space of carrier-grade NAT (100.64.0.0/10).
func InternalRanges() []netip.Prefix {
	return append(LoopbackRanges(), namedRanges("private")...)
}

// LoopbackRanges are 127.0.0.0/8 and ::1: what a Policy allows to reach
// servers on this machine, as tests and the demo do.
func LoopbackRanges() []netip.Prefix { return namedRanges("loopback") }

// namedRanges are the words ParseDeny and ParseAllow know.
func namedRanges(word string) []netip.Prefix {
	var cidrs []string
	switch word {
	case "loopback":
		cidrs = []string{"127.0.0.0/8", "::1/128"}
	case "private":
		cidrs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "100.64.0.0/10"}
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
// addresses ("10.1.2.3") or the words "loopback", "private" (with the
// shared address space 100.64.0.0/10) and "link-local". An empty list is
// nil.
func ParseDeny(list string) ([]netip.Prefix, error) {
	return parseRanges("deny", list)
}

// ParseAllow reads an allow list (see Policy.Allow), written as a deny list
// is: "loopback", "private", CIDRs, addresses. An item that lifts nothing
// is refused, so a mistake shows: one outside every internal range (it is
// allowed anyway), or one inside the built-in list (it stays denied).
func ParseAllow(list string) ([]netip.Prefix, error) {
	allow, err := parseRanges("allow", list)
	if err != nil {
		return nil, err
	}
	for _, a := range allow {
		for _, b := range builtinDeny() {
			if b.Overlaps(a) && b.Bits() <= a.Bits() {
				return nil, fmt.Errorf("fetch: allow list item %s is in %s, which is always denied", a, b)
			}
		}
		if !slices.ContainsFunc(InternalRanges(), a.Overlaps) {
			return nil, fmt.Errorf("fetch: allow list item %s is in no internal range (loopback, private): it is not denied, there is nothing to allow", a)
		}
	}
	return allow, nil
}

func parseRanges(kind, list string) ([]netip.Prefix, error) {
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
		return nil, fmt.Errorf("fetch: %s list item %q is not a CIDR, an address, or one of loopback, private, link-local", kind, item)
	}
	return out, nil
}

// inRanges returns the range of list that holds addr, if any. An IPv4
// address is checked in both its forms (1.2.3.4 and ::ffff:1.2.3.4), and the
// IPv4 address inside a NAT64 address (64:ff9b::/96) too, so no spelling of
// a denied address slips through.
func inRanges(addr netip.Addr, list []netip.Prefix) (netip.Prefix, bool) {
	addr = addr.WithZone("") // a zoned address never matches a prefix
	forms := []netip.Addr{addr.Unmap()}
	if v4 := addr.Unmap(); v4.Is4() {
		forms = append(forms, netip.AddrFrom16(v4.As16()))
	}
	if nat64 := netip.MustParsePrefix("64:ff9b::/96"); nat64.Contains(addr) {
		b := addr.As16()
		forms = append(forms, netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, p := range list {
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
		return p.denial(addr)
	}
	return nil
}

// denial says why addr may not be reached, or nil: the range it is in and,
// for an internal range, the setting that would allow it. Deny wins over
// Allow.
func (p Policy) denial(addr netip.Addr) error {
	if prefix, denied := inRanges(addr, p.Deny); denied {
		return fmt.Errorf("%w: %s is in %s", ErrDenied, addr, prefix)
	}
	if prefix, internal := inRanges(addr, InternalRanges()); internal {
		if _, allowed := inRanges(addr, p.Allow); !allowed {
			return fmt.Errorf("%w: %s is in %s, an internal range denied unless allowed (%s=%s allows it)",
				ErrDenied, addr, prefix, p.AllowSetting, prefix)
		}
	}
	return nil
}
