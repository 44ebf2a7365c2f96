package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fixity"
)

// version writes a version of one file into a local store folder.
func version(t *testing.T, root, object string, n int, content string) string {
	t.Helper()
	vdir := filepath.Join(root, object, fmt.Sprintf("v%d", n))
	p := filepath.Join(vdir, "producer", "a.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	f, err := os.Create(filepath.Join(vdir, "manifest.checkm"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := checkm.Write(f, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256",
		HashValue: hex.EncodeToString(sum[:]), FileSize: int64(len(content)), FileName: "producer/a.txt"}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// counter returns a counter's total; -1 when the reader has no series of it.
func counter(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				var total int64
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					total += dp.Value
				}
				if len(m.Data.(metricdata.Sum[int64]).DataPoints) == 0 {
					return -1
				}
				return total
			}
		}
	}
	return -1
}

// TestBothCountersAreExportedAtZeroBeforeAnyRound: a failures series that
// first appears at 1 shows no increase to an alert (increase() needs two
// samples), so the first damaged version would go unnoticed.
func TestBothCountersAreExportedAtZeroBeforeAnyRound(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	if _, err := New(meter, fixity.Location{Root: t.TempDir()}, fixity.Reader{}, 10, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ingestq.fixity.failures", "ingestq.fixity.checked"} {
		if got := counter(t, reader, name); got != 0 {
			t.Errorf("%s = %d before any round, want a series at 0", name, got)
		}
	}
}

func TestARoundChecksASampleAndCountsTheDamagedVersions(t *testing.T) {
	root := t.TempDir()
	version(t, root, "ark_99999_fk4a", 1, "alpha")
	damaged := version(t, root, "ark_99999_fk4a", 2, "alpha two")
	version(t, root, "ark_99999_fk4b", 1, "bravo")
	// A version a crash left without a manifest is not one.
	os.MkdirAll(filepath.Join(root, "ark_99999_fk4b", "v2", "producer"), 0o755)
	os.WriteFile(damaged, []byte("ALPHA TWO"), 0o644)

	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	a, err := New(meter, fixity.Location{Root: root}, fixity.Reader{}, 10, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	checked, failed, err := a.Round(context.Background())
	if err != nil || checked != 3 || failed != 1 {
		t.Fatalf("round: checked %d, failed %d (%v); want 3 and 1", checked, failed, err)
	}
	if got := counter(t, reader, "ingestq.fixity.failures"); got != 1 {
		t.Errorf("ingestq.fixity.failures = %d, want 1", got)
	}
	// A smaller sample checks that many.
	a.Sample = 2
	if checked, _, err := a.Round(context.Background()); err != nil || checked != 2 {
		t.Errorf("a sample of 2 checked %d (%v)", checked, err)
	}
	if got := counter(t, reader, "ingestq.fixity.checked"); got != 5 {
		t.Errorf("ingestq.fixity.checked = %d, want 5", got)
	}
}
