package merrittstore

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Actions of a storage call, the first part of a store node's mode.
const (
	ActionAdd    = "add"
	ActionUpdate = "update"
)

// Encode spells an identifier (an ARK, a file id) inside a URL path and in
// a store node's mode as Merritt's programs do, with Java's URLEncoder:
// letters, digits and ".-*_" stay, a space is "+", every other byte of its
// UTF-8 is %XX in upper case. Go's url.QueryEscape differs on '~' and '*'.
func Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Decode reads what Encode (or any form encoding) wrote, as Java's
// URLDecoder does: "+" is a space.
func Decode(s string) (string, error) { return url.QueryUnescape(s) }

// Mode is a store node's mode as Merritt's storage consumer reads it:
// "<add|update>/<node>/<ARK, encoded>".
func Mode(action string, node int, ark string) string {
	return action + "/" + strconv.Itoa(node) + "/" + Encode(ark)
}

// ParseMode reads a store node's mode written by Mode (or by Merritt's
// ingest service). An error names what is wrong.
func ParseMode(mode string) (action string, node int, ark string, err error) {
	parts := strings.Split(mode, "/")
	if len(parts) != 3 {
		return "", 0, "", fmt.Errorf("mode %q is not <add|update>/<node>/<ARK>", mode)
	}
	if parts[0] != ActionAdd && parts[0] != ActionUpdate {
		return "", 0, "", fmt.Errorf("mode %q: %q is neither add nor update", mode, parts[0])
	}
	if node, err = strconv.Atoi(parts[1]); err != nil || node < 1 {
		return "", 0, "", fmt.Errorf("mode %q: %q is not a node number", mode, parts[1])
	}
	if ark, err = Decode(parts[2]); err != nil || ark == "" {
		return "", 0, "", fmt.Errorf("mode %q: the object id %q cannot be read", mode, parts[2])
	}
	return parts[0], node, ark, nil
}

// ObjectFromManifestURL is the object id Merritt's inventory service takes
// from an inventory node's manifest URL: the URL path's last segment,
// decoded. It is also the name of the inventory lock it takes.
func ObjectFromManifestURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("manifest URL %q: %w", raw, err)
	}
	p := u.EscapedPath()
	return Decode(p[strings.LastIndexByte(p, '/')+1:])
}

// ParseManifestURL reads a storage manifest URL as Merritt's inventory
// service does: the segment "manifest", then the node, then the object id;
// what comes before "manifest" is the storage service's base URL.
func ParseManifestURL(raw string) (base string, node int, ark string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", 0, "", fmt.Errorf("manifest URL %q is not an absolute URL", raw)
	}
	segs := strings.Split(u.EscapedPath(), "/")
	for i, s := range segs {
		if s != "manifest" || i+3 != len(segs) {
			continue
		}
		if node, err = strconv.Atoi(segs[i+1]); err != nil || node < 1 {
			return "", 0, "", fmt.Errorf("manifest URL %q: %q is not a node number", raw, segs[i+1])
		}
		if ark, err = Decode(segs[i+2]); err != nil || ark == "" {
			return "", 0, "", fmt.Errorf("manifest URL %q: the object id cannot be read", raw)
		}
		return u.Scheme + "://" + u.Host + strings.Join(segs[:i], "/"), node, ark, nil
	}
	return "", 0, "", fmt.Errorf("manifest URL %q is not <storage>/manifest/<node>/<object>", raw)
}

// DeleteList is a store node's "delete" (and the update call's delete form
// field) for file ids: one a line, each ended by a newline, as Merritt's
// ingest service writes it; "" for none.
func DeleteList(files []string) string {
	var b strings.Builder
	for _, f := range files {
		b.WriteString(f + "\n")
	}
	return b.String()
}

// ParseDeleteList reads a delete list as Merritt's storage service does:
// one file id a line, blank lines ignored.
func ParseDeleteList(s string) []string {
	var out []string
	for line := range strings.SplitSeq(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}
