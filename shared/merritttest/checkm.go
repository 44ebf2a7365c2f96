package merritttest

import (
	"bufio"
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// addRow is one row of an add manifest.
type addRow struct {
	url, alg, digest, name, mimeType string
	size                             int64
}

// The add manifest's profiles and the namespaces of its prefixes.
var (
	addProfiles = []string{"http://uc3.cdlib.org/registry/store/manifest/mrt-add-manifest",
		"http://uc3.cdlib.org/registry/mrt/mrt-add-manifest"}
	namespaces = map[string]string{
		"http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#":  "nfo",
		"http://www.semanticdesktop.org/ontologies/2007/01/19/nie/#": "nie",
		"http://uc3.cdlib.org/ontology/mrt/mom#":                     "mrt",
	}
	// columns a name may take, by namespace.
	columnNames = map[string][]string{
		"nfo": {"fileurl", "hashalgorithm", "hashvalue", "filesize", "filelastmodified", "filename"},
		"nie": {"mimetype"},
		"mrt": {"primaryidentifier", "localidentifier", "creator", "title", "date"},
	}
)

// splitDelim is where a manifest line splits into values: a '|' with the
// blanks around it.
var splitDelim = regexp.MustCompile(`\s*\|\s*`)

// splitRow splits a line as the service does (Java's String.split): the
// values between the delimiters, trailing empty ones dropped.
func splitRow(line string) []string {
	parts := splitDelim.Split(line, -1)
	for len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// dec is how the service reads every value of a manifest row but its URL:
// "%20" is a space, then "%7c" a '|'; nothing else is decoded, so no
// value read has "%20" or "%7c" in it.
func dec(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "%20", " "), "%7c", "|")
}

// parseAddManifest reads an add manifest as the service does: headers
// lower-cased, a profile it knows, every column's namespace declared by a
// #%prefix, columns it knows; a row per file.
func parseAddManifest(data []byte) ([]addRow, *exception) {
	bad := func(status, format string, args ...any) ([]addRow, *exception) {
		return nil, fail(status, "Checkm", "getRows", format, args...)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefixes := map[string]string{}
	var profile string
	var cols []string
	var rows []addRow
	eof := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.HasPrefix(line, "#%") {
			parts := splitRow(strings.ToLower(line))
			switch parts[0] {
			case "#%checkm_0.7":
			case "#%profile":
				if len(parts) > 1 {
					profile = strings.Join(parts[1:], "|")
				}
			case "#%prefix":
				if len(parts) != 2 {
					return bad("REQUEST_INVALID", "#%%prefix line invalid: %s", line)
				}
				name, uri, ok := strings.Cut(parts[1], ":<")
				if !ok || !strings.HasSuffix(uri, ">") {
					return bad("REQUEST_INVALID", "#%%prefix line invalid: %s", line)
				}
				if ns, known := namespaces[strings.TrimSuffix(uri, ">")]; known {
					prefixes[name] = ns
				}
			case "#%columns":
				if cols != nil {
					return bad("REQUEST_INVALID", "multiple #@COLUMN supplied")
				}
				for _, c := range parts[1:] {
					p, n, ok := strings.Cut(c, ":")
					if !ok {
						return bad("REQUEST_INVALID", "namespace not supported - item=%s", c)
					}
					ns, declared := prefixes[p]
					if !declared {
						return bad("REQUEST_INVALID", "namespace not supported - item=%s", c)
					}
					if !slices.Contains(columnNames[ns], n) {
						return bad("REQUEST_INVALID", "name not supported:%s", c)
					}
					cols = append(cols, n)
				}
			case "#%eof":
				eof = true
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if profile == "" {
			return bad("INVALID_OR_MISSING_PARM", "setHeaders - manifestProfile is missing")
		}
		if !slices.Contains(addProfiles, profile) {
			return bad("REQUEST_INVALID", "handleHeaders - manifestProfile does not match expected form - input:%s", profile)
		}
		if cols == nil {
			return bad("REQUEST_INVALID", "#@columns not supplied")
		}
		values := splitRow(line)
		if len(values) > len(cols) {
			return bad("REQUEST_INVALID", "row has %d values, the manifest %d columns: %s", len(values), len(cols), line)
		}
		var row addRow
		row.size = -1
		for i, v := range values {
			if cols[i] != "fileurl" {
				v = dec(v)
			}
			switch cols[i] {
			case "fileurl":
				row.url = v
			case "hashalgorithm":
				row.alg = v
			case "hashvalue":
				row.digest = strings.ToLower(v)
			case "filesize":
				if v != "" {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return bad("REQUEST_INVALID", "file size not numeric: %s", v)
					}
					row.size = n
				}
			case "filename":
				row.name = v
			case "mimetype":
				row.mimeType = v
			}
		}
		if row.url == "" || row.name == "" {
			return bad("REQUEST_INVALID", "row without a file URL or file name: %s", line)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return bad("REQUEST_INVALID", "the manifest cannot be read: %v", err)
	}
	if !eof {
		return bad("INVALID_DATA_FORMAT", "Checkm: EOF without #%%EOF terminator header")
	}
	if len(rows) == 0 {
		return bad("REQUEST_INVALID", "the manifest lists no file")
	}
	return rows, nil
}
