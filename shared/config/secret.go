package config

import (
	"os"
	"strings"
)

// ReadSecretFile reads a secret (a password, a token) from the file an
// operator named instead of giving it in a variable or a flag, which ps
// shows. Surrounding white space is dropped: editors and echo end files
// with a newline that is not part of the secret.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
