package program

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/ingestq/ingestq/shared/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthCheckTimeout bounds -check-health; container runtimes give a
// health command a few seconds (docker-compose.yml allows 5s).
const healthCheckTimeout = 3 * time.Second

// checkHealth is -check-health: the health probe of an image without a
// shell. It asks the service configured like this process, on its own
// listen address, for its overall grpc.health.v1 status and prints it. It
// returns an error unless the answer is SERVING.
func checkHealth(ctx context.Context, cfg *config.Common, stdout io.Writer) error {
	addr, err := dialAddr(cfg.Listen)
	if err != nil {
		return err
	}
	creds, err := healthCheckCredentials(cfg.TLS)
	if err != nil {
		return fmt.Errorf("health check of %s: %w", addr, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("health check of %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health check of %s: %w", addr, err)
	}
	fmt.Fprintf(stdout, "%s %s\n", addr, resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check of %s: %s, want SERVING", addr, resp.GetStatus())
	}
	return nil
}

// dialAddr turns a listen address into one to dial from the same host: an
// unspecified host (0.0.0.0, [::] or none) becomes the loopback address of
// its family; a named or specific host is kept.
func dialAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	if host == "" {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsUnspecified() {
		return listen, nil
	}
	if ip.Is4() {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	return net.JoinHostPort("::1", port), nil
}

// healthCheckCredentials speaks to the service as its TLS settings demand.
// Plaintext without a certificate. With one, the probe trusts exactly the
// certificate in INGESTQ_TLS_CERT instead of a CA and a host name: it dials
// its own process by a loopback address the certificate need not name. With
// a client CA (mutual TLS), it presents that same certificate as its
// client certificate, so the certificate must be signed by a CA of the
// bundle and allow client authentication.
func healthCheckCredentials(files config.TLSFiles) (credentials.TransportCredentials, error) {
	if files.Cert == "" {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate %s and key %s: %w", files.Cert, files.Key, err)
	}
	served := cert.Certificate[0]
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the pin in VerifyConnection, stricter than a CA.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, served) {
				return fmt.Errorf("the server does not present the certificate in %s (changed since the service started?)", files.Cert)
			}
			return nil
		},
	}
	if files.ClientCA != "" {
		leaf, err := x509.ParseCertificate(served)
		if err != nil {
			return nil, fmt.Errorf("parsing TLS certificate %s: %w", files.Cert, err)
		}
		if !allowsClientAuth(leaf) {
			return nil, errors.New("mutual TLS: the health check presents " + files.Cert +
				" as its client certificate, but it lacks the clientAuth extended key usage")
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// allowsClientAuth reports whether a TLS server verifying client
// certificates accepts leaf for client authentication (no extended key
// usage means any).
func allowsClientAuth(leaf *x509.Certificate) bool {
	return len(leaf.ExtKeyUsage) == 0 ||
		slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) ||
		slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny)
}
