package checkm

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Write writes a manifest that Parse reads back to the same profile, fields
// and entries (Line aside; an empty FileName comes back as the URL's base
// name). fields decide the column order; with none, Write uses BatchFields
// for the batch profiles and ObjectFields otherwise. Entries are checked as
// Parse checks them. When a value other than a file URL holds a '|', the
// manifest is marked "#%encoded | %7c" and every '|' of those values is
// written "%7c"; a manifest without one is written as is. Values that the
// format cannot carry (a line break, surrounding spaces, a '|' in a URL or
// a header, "%7c" in a marked manifest) are refused, so Write never emits a
// manifest that reads back differently.
func Write(w io.Writer, profile string, fields []string, entries []Entry) error {
	if len(fields) == 0 {
		fields = ObjectFields()
		if profile == ProfileBatch || profile == ProfileContainerBatch {
			fields = BatchFields()
		}
	}
	if err := writable(profile); err != nil {
		return fmt.Errorf("checkm: profile: %w", err)
	}
	for _, f := range fields {
		if err := writable(f); err != nil {
			return fmt.Errorf("checkm: field name: %w", err)
		}
	}
	cols, err := columns(fields)
	if err != nil {
		return fmt.Errorf("checkm: fields: %w", err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("checkm: manifest has no entries")
	}
	encode := slices.ContainsFunc(entries, func(e Entry) bool { return holdsPipe(e, cols) })

	// bufio.Writer keeps the first write error; Flush returns it.
	bw := bufio.NewWriter(w)
	bw.WriteString(Header + "\n")
	if profile != "" {
		bw.WriteString("#%profile | " + profile + "\n")
	}
	bw.WriteString("#%prefix | mrt: | " + PrefixMRT + "\n")
	bw.WriteString("#%prefix | nfo: | " + PrefixNFO + "\n")
	if encode {
		bw.WriteString(encodedDirective + " | " + pipeEscape + "\n")
	}
	bw.WriteString("#%fields | " + strings.Join(fields, " | ") + "\n")
	values := make([]string, len(cols))
	for i := range entries {
		e := entries[i]
		if err := normalize(&e, !encode); err != nil {
			return fmt.Errorf("checkm: entry %d (%s): %w", i+1, quoteShort(e.FileURL), err)
		}
		for c, f := range cols {
			switch f {
			case fieldUnknown:
				values[c] = ""
			case fieldFileSize:
				values[c] = ""
				if e.FileSize >= 0 {
					values[c] = strconv.FormatInt(e.FileSize, 10)
				}
			case fieldFileURL:
				values[c] = e.FileURL
			default:
				values[c] = e.get(f)
				if encode {
					if strings.Contains(values[c], pipeEscape) {
						return fmt.Errorf("checkm: entry %d (%s): %s: %s holds %q, which reads back as '|' in a manifest that spells '|' so (another value holds one)",
							i+1, quoteShort(e.FileURL), fields[c], quoteShort(values[c]), pipeEscape)
					}
					values[c] = strings.ReplaceAll(values[c], "|", pipeEscape)
				}
			}
			if err := writable(values[c]); err != nil {
				return fmt.Errorf("checkm: entry %d (%s): %s: %w", i+1, quoteShort(e.FileURL), fields[c], err)
			}
		}
		// A row whose first value starts with '#' would read back as a
		// comment.
		if strings.HasPrefix(values[0], "#") {
			return fmt.Errorf("checkm: entry %d (%s): %s %s starts with '#' in the first column and would read as a comment",
				i+1, quoteShort(e.FileURL), fields[0], quoteShort(values[0]))
		}
		bw.WriteString(strings.Join(values, " | ") + "\n")
	}
	bw.WriteString("#%eof\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkm: writing the manifest: %w", err)
	}
	return nil
}

// holdsPipe reports whether e holds a '|' that only a marked manifest can
// say: in its file name (taken from the URL when e has none, as Parse
// takes it when the manifest has no name column) or in a value Write
// would spell encoded, any but the URL and the size.
func holdsPipe(e Entry, cols []field) bool {
	name := e.FileName
	if name == "" {
		if u, err := url.Parse(e.FileURL); err == nil {
			name = urlFileName(u)
		}
	}
	if strings.ContainsRune(name, '|') {
		return true
	}
	for _, f := range cols {
		switch f {
		case fieldUnknown, fieldFileURL, fieldFileSize, fieldFileName:
			continue
		}
		if strings.ContainsRune(e.get(f), '|') {
			return true
		}
	}
	return false
}

// writable reports why a value cannot be one column of a manifest line.
func writable(v string) error {
	switch {
	case strings.ContainsAny(v, "|\n"):
		return fmt.Errorf("%s contains '|' or a line break", quoteShort(v))
	case v != strings.TrimSpace(v):
		return fmt.Errorf("%s has leading or trailing spaces", quoteShort(v))
	}
	return nil
}
