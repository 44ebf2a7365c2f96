package workdir

import "testing"

func TestFormatBytesUsesBinaryUnits(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDiskUsageAddsUpAndRefusesAMissingFolder(t *testing.T) {
	u, err := DiskUsage(t.TempDir())
	if err != nil || u.Total == 0 || u.Used+u.Free != u.Total {
		t.Errorf("DiskUsage = %+v, %v; want total = used + free > 0", u, err)
	}
	if _, err := DiskUsage(t.TempDir() + "/missing"); err == nil {
		t.Error("a missing folder was measured")
	}
}
