package program

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/waittest"
)

// pemPair is a certificate and its key as PEM files.
type pemPair struct{ cert, key string }

// testPKI writes a CA and certificates it signed into dir. No certificate
// names 127.0.0.1: the probe must not depend on the name it dials.
type testPKI struct {
	ca string
	// serverAndClient allows both TLS server and client authentication.
	serverAndClient pemPair
	// serverOnly allows TLS server authentication only.
	serverOnly pemPair
	// other is a second certificate like serverAndClient, with its own key.
	other pemPair
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ingestq test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER)

	issue := func(name string, usages ...x509.ExtKeyUsage) pemPair {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			DNSNames:     []string{"teststage.example.org"},
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usages,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		p := pemPair{cert: filepath.Join(dir, name+".pem"), key: filepath.Join(dir, name+"-key.pem")}
		writePEM(t, p.cert, "CERTIFICATE", der)
		writePEM(t, p.key, "PRIVATE KEY", keyDER)
		return p
	}
	return testPKI{
		ca:              filepath.Join(dir, "ca.pem"),
		serverAndClient: issue("server-and-client", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth),
		serverOnly:      issue("server-only", x509.ExtKeyUsageServerAuth),
		other:           issue("other", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth),
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, blockType string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitListening waits until addr accepts TCP connections: the program
// listens only once its Setup is done, so from then on its health is
// SERVING.
func waitListening(t *testing.T, svc *running) {
	t.Helper()
	waittest.Until(t, 30*time.Second, func() error {
		select {
		case <-svc.done:
			t.Fatalf("the service stopped before it listened: %v", svc.err)
		default:
		}
		conn, err := net.DialTimeout("tcp", svc.addr, time.Second)
		if err != nil {
			return fmt.Errorf("nothing listens on %s: %w", svc.addr, err)
		}
		conn.Close()
		return nil
	})
}

func tlsArgs(p pemPair, clientCA string) []string {
	args := []string{"-tls-cert", p.cert, "-tls-key", p.key}
	if clientCA != "" {
		args = append(args, "-tls-client-ca", clientCA)
	}
	return args
}

func TestCheckHealthSucceedsOnlyWhenTheServiceAnswersServing(t *testing.T) {
	pki := newTestPKI(t)
	spec := Spec{Name: "teststage", Defaults: testDefaults}
	tests := []struct {
		name string
		// serve are the running service's arguments; nil runs no service.
		serve []string
		// probeListen gives the probe's -listen from the service's address.
		probeListen func(addr string) string
		probe       []string
		wantErr     string // "" for a healthy answer
	}{
		{name: "plaintext service answers SERVING", serve: []string{}},
		{name: "unspecified listen host is dialled on loopback", serve: []string{},
			probeListen: func(addr string) string {
				_, port, _ := net.SplitHostPort(addr)
				return "0.0.0.0:" + port
			}},
		{name: "TLS service whose certificate names no loopback address",
			serve: tlsArgs(pki.serverAndClient, ""), probe: tlsArgs(pki.serverAndClient, "")},
		{name: "mutual TLS service accepts its own certificate as the client's",
			serve: tlsArgs(pki.serverAndClient, pki.ca), probe: tlsArgs(pki.serverAndClient, pki.ca)},
		{name: "nothing listening is unhealthy", serve: nil, wantErr: "health check of 127.0.0.1:"},
		{name: "server presenting another certificate than the configured one is unhealthy",
			serve: tlsArgs(pki.other, ""), probe: tlsArgs(pki.serverAndClient, ""),
			wantErr: "does not present the certificate in " + pki.serverAndClient.cert},
		{name: "mutual TLS with a certificate that cannot authenticate a client is refused before dialling",
			serve: tlsArgs(pki.serverOnly, pki.ca), probe: tlsArgs(pki.serverOnly, pki.ca),
			wantErr: "lacks the clientAuth extended key usage"},
		{name: "plaintext probe of a TLS service is unhealthy",
			serve: tlsArgs(pki.serverAndClient, ""), wantErr: "health check of 127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := servicetest.FreeAddr(t)
			if tt.serve != nil {
				svc := startProgram(t, spec, tt.serve...)
				waitListening(t, svc)
				addr = svc.addr
			}
			listen := addr
			if tt.probeListen != nil {
				listen = tt.probeListen(addr)
			}
			var out bytes.Buffer
			err := Run(context.Background(), spec, append([]string{"-check-health", "-listen", listen}, tt.probe...),
				noEnv, &out, io.Discard)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("check: %v, want healthy", err)
				}
				if want := addr + " SERVING\n"; out.String() != want {
					t.Errorf("check printed %q, want %q", out.String(), want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("check: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDialAddrReplacesOnlyAnUnspecifiedHost(t *testing.T) {
	tests := []struct{ listen, want string }{
		{"0.0.0.0:7401", "127.0.0.1:7401"},
		{"[::]:7401", "[::1]:7401"},
		{":7401", "127.0.0.1:7401"},
		{"127.0.0.1:7401", "127.0.0.1:7401"},
		{"10.1.2.3:7401", "10.1.2.3:7401"},
		{"batcher.example.org:7401", "batcher.example.org:7401"},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			got, err := dialAddr(tt.listen)
			if err != nil || got != tt.want {
				t.Errorf("dialAddr(%q) = %q, %v; want %q", tt.listen, got, err, tt.want)
			}
		})
	}
}
