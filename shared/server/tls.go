package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// TLSFiles name PEM files. Cert and Key turn on TLS; ClientCA in addition
// demands a client certificate signed by one of its CAs (mutual TLS).
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

func (f TLSFiles) credentials() (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.ClientCAFile != "" {
		pool, err := LoadCertPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// LoadCertPool reads a bundle of PEM certificates (a CA's) into a pool, and
// refuses a file that holds none: a pool left empty would refuse every
// peer without saying why.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
