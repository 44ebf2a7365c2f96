package web

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var templateFuncs = template.FuncMap{
	"jobURL":      jobURL,
	"batchURL":    batchURL,
	"workerURL":   workerURL,
	"payloadType": payloadTypeName,
	"lower":       strings.ToLower,
	"join":        strings.Join,
	"bytes":       exactBytes,
	"in":          inList,
	"args":        args,
	"mode":        submissionMode,
}

// inList reports whether word is one of the space-separated words of list.
func inList(list, word string) bool { return slices.Contains(strings.Fields(list), word) }

// args builds a map from key, value pairs: a template passes several
// values to another template with it.
func args(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("args: %d values, want key, value pairs", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("args: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// submissionMode is "add" or "update" as the queue writes it ("" if unset).
func submissionMode(m v1.SubmissionMode) string {
	if m == v1.SubmissionMode_SUBMISSION_MODE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(m.String(), "SUBMISSION_MODE_"))
}

func jobURL(jid string) string   { return "/jobs/" + url.PathEscape(jid) }
func batchURL(bid string) string { return "/batches/" + url.PathEscape(bid) }

// when shows a timestamp in UTC, or "—" when there is none.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "—"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long ago ts was, to the second.
func ago(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "—"
	}
	d := now.Sub(ts.AsTime()).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// age says how long something has waited, to the unit that matters:
// "45 s", "4 min", "3 h 20 min", "2 d 3 h".
func age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}

// humanBytes shows a size in decimal units ("1.5 GB").
func humanBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"kB", "MB", "GB", "TB", "PB", "EB"}
	v := float64(n)
	i := -1
	for v >= 1000 && i < len(units)-1 {
		v /= 1000
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// exactBytes is humanBytes with the exact count beside.
func exactBytes(n int64) string {
	if n < 1000 {
		return humanBytes(n)
	}
	return fmt.Sprintf("%s (%d bytes)", humanBytes(n), n)
}

// barWidth is n's share of top as a percentage for an SVG bar; a count
// above zero stays visible.
func barWidth(n, top int32) float64 {
	if n <= 0 || top <= 0 {
		return 0
	}
	w := float64(n) * 100 / float64(top)
	if w < 1 {
		w = 1
	}
	return float64(int(w*100)) / 100
}

// segment is one part of a stacked progress bar.
type segment struct {
	Name  string  `json:"-"`
	Count int32   `json:"count"`
	X     float64 `json:"x"`
	Width float64 `json:"width"`
}

// progress lays a batch's job counts out as a stacked bar, ended work first.
func progress(c *v1.BatchJobCounts) ([]segment, int32) {
	segs := []segment{
		{Name: "completed", Count: c.GetCompleted()},
		{Name: "failed", Count: c.GetFailed()},
		{Name: "deleted", Count: c.GetDeleted()},
		{Name: "processing", Count: c.GetProcessing()},
	}
	var total int32
	for _, s := range segs {
		total += s.Count
	}
	x := 0.0
	for i := range segs {
		if total > 0 {
			segs[i].Width = float64(int(float64(segs[i].Count)*10000/float64(total))) / 100
		}
		segs[i].X = x
		x += segs[i].Width
	}
	return segs, total
}
