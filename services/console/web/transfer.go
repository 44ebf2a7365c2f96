package web

import (
	"fmt"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// transferView is how far a job's step has moved its bytes, as the job
// page and the jobs list show it: a bar, and what it means in words.
type transferView struct {
	Shown bool `json:"shown"`
	// Percent is the bar's width: bytes done of those expected (0 when
	// none are expected yet).
	Percent float64 `json:"percent"`
	// Summary: "7.5 GB of 53.7 GB (14%) at 12.5 MB/s, about 1 h 2 min
	// left". Detail: the phase, resumes and restarts, and, for a step
	// whose bytes have not moved for a while, since when.
	Summary string `json:"summary"`
	Detail  string `json:"detail"`
	// Stuck: the batcher judges the bytes have not moved for too long.
	Stuck bool `json:"stuck"`
}

func newTransfer(p *v1.Progress, now time.Time) transferView {
	if p == nil {
		return transferView{}
	}
	v := transferView{Shown: true, Stuck: p.GetNotMoving()}
	done, expected := p.GetBytesDone(), p.GetBytesExpected()
	v.Summary = humanBytes(done)
	if expected > 0 {
		pct := min(float64(done)*100/float64(expected), 100)
		v.Percent = float64(int(pct*100)) / 100
		v.Summary = fmt.Sprintf("%s of %s (%d%%)", humanBytes(done), humanBytes(expected), int(pct))
	}
	if rate := p.GetBytesPerSecond(); rate > 0 {
		v.Summary += " at " + humanBytes(int64(rate)) + "/s"
		if left := p.GetRemaining(); left != nil {
			v.Summary += ", about " + age(left.AsDuration()) + " left"
		}
	}
	var detail []string
	if phase := p.GetPhase(); phase != "" {
		detail = append(detail, strings.ToUpper(phase[:1])+phase[1:])
	}
	if n := p.GetResumes(); n > 0 {
		detail = append(detail, fmt.Sprintf("resumed %s where a transfer stopped", times(n)))
	}
	if n := p.GetRestarts(); n > 0 {
		detail = append(detail, fmt.Sprintf("started again from the first byte %s", times(n)))
	}
	if moved := p.GetMoved(); moved != nil {
		if still := now.Sub(moved.AsTime()); v.Stuck || (p.GetBytesPerSecond() == 0 && still >= time.Minute) {
			detail = append(detail, "no bytes for "+age(still))
		}
	}
	v.Detail = strings.Join(detail, "; ")
	return v
}

// times says how often: "once", "3 times".
func times(n int32) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
