package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, der: der}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// issue signs a certificate for 127.0.0.1 usable by a server or a client.
func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// writePEM writes cert and key files (and the CA file) as an operator would.
func writePEM(t *testing.T, dir string, cert tls.Certificate, ca *testCA) (certFile, keyFile, caFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*pem.Block{
		"cert.pem": {Type: "CERTIFICATE", Bytes: cert.Certificate[0]},
		"key.pem":  {Type: "PRIVATE KEY", Bytes: keyDER},
		"ca.pem":   {Type: "CERTIFICATE", Bytes: ca.der},
	}
	for name, block := range files {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
}

func TestTLSAndMutualTLS(t *testing.T) {
	ca := newTestCA(t, "ingestq test CA")
	otherCA := newTestCA(t, "someone else's CA")
	certFile, keyFile, caFile := writePEM(t, t.TempDir(), ca.issue(t, "server"), ca)
	clientCert := ca.issue(t, "client")
	strangerCert := otherCA.issue(t, "stranger")

	tlsClient := func(certs ...tls.Certificate) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool(), Certificates: certs}))
	}
	plaintext := grpc.WithTransportCredentials(insecure.NewCredentials())

	tests := []struct {
		name    string
		files   TLSFiles
		client  grpc.DialOption
		wantErr bool
	}{
		{"TLS client trusting the CA is answered", TLSFiles{CertFile: certFile, KeyFile: keyFile}, tlsClient(), false},
		{"plaintext client is refused by a TLS server", TLSFiles{CertFile: certFile, KeyFile: keyFile}, plaintext, true},
		{"mutual TLS client with a certificate of the CA is answered",
			TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, tlsClient(clientCert), false},
		{"mutual TLS client without a certificate is refused",
			TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, tlsClient(), true},
		{"mutual TLS client with another CA's certificate is refused",
			TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, tlsClient(strangerCert), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, Options{TLS: tt.files}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, newPingService()) })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := callUnary(ctx, dial(t, srv.addr, tt.client), false, "hi")
			if (err != nil) != tt.wantErr {
				t.Errorf("call: %v, want error: %t", err, tt.wantErr)
			}
		})
	}
}

func TestBadTLSFilesAreReportedByNew(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ingestq test CA")
	certFile, keyFile, _ := writePEM(t, dir, ca.issue(t, "server"), ca)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files TLSFiles
	}{
		{"missing key file", TLSFiles{CertFile: certFile, KeyFile: filepath.Join(dir, "absent.pem")}},
		{"client CA file without certificates", TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(Options{TLS: tt.files}); err == nil {
				t.Error("New accepted the files")
			}
		})
	}
}

// TestLoadCertPoolReadsACABundleAndNamesAFileWithoutOne: the one reader of
// CA bundles (the server's client CA, the console's dialing of the stages)
// loads the bundle's certificates and names the file it cannot use.
func TestLoadCertPoolReadsACABundleAndNamesAFileWithoutOne(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ingestq test CA")
	_, _, caFile := writePEM(t, dir, ca.issue(t, "server"), ca)
	if pool, err := LoadCertPool(caFile); err != nil || !pool.Equal(ca.pool()) {
		t.Errorf("LoadCertPool(%s): %v; want the CA's certificate", caFile, err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "absent.pem")
	for file, want := range map[string]string{notPEM: notPEM + " holds no PEM certificate", missing: "reading " + missing} {
		if _, err := LoadCertPool(file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadCertPool(%s): %v; want an error saying %q", filepath.Base(file), err, want)
		}
	}
}
