package checkm

import (
	"fmt"
	"net/url"
	"path/filepath"
)

// FileURL is the file:// URL of the absolute path, escaped: a folder's name
// may hold a space, '#', '%' or '?'.
func FileURL(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}

// FilePath is the absolute path a file:// URL of this machine names.
func FilePath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("%s is not a file:// URL of an absolute path on this machine", raw)
	}
	return filepath.FromSlash(u.Path), nil
}
