package fetch

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// The dial check runs on the address about to be connected, before
// connect(2): a dial of the metadata address fails with ErrDenied at once
// instead of trying to reach it (which would end in a timeout or "network
// unreachable" here).
func TestDialOfADeniedAddressFailsBeforeConnecting(t *testing.T) {
	c := New(Policy{})
	dial := c.http.Transport.(*http.Transport).DialContext
	for _, addr := range []string{"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "0.0.0.0:80"} {
		conn, err := dial(t.Context(), "tcp", addr)
		if conn != nil {
			conn.Close()
		}
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), " is in ") {
			t.Errorf("dial %s: error = %v, want ErrDenied", addr, err)
		}
	}
}
