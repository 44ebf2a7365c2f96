package ingestqv1

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// Limits of RecordingService requests.
const (
	// MinLeaseDuration and MaxLeaseDuration bound a lease: shorter than a
	// second cannot survive a round trip, longer than an hour keeps a job
	// from every other recorder for too long after a client dies.
	MinLeaseDuration = time.Second
	MaxLeaseDuration = time.Hour
	// MaxLeaseWait bounds how long one Lease call may wait; the server
	// waits at most this long whatever the request says.
	MaxLeaseWait = 10 * time.Minute
	// LeaseInterval is the recorder's default INGESTQ_LEASE_MAX_WAIT, the
	// longest one Lease call waits for a job: an inventory that leases
	// asks again at least that often. Jobs that wait in Recording longer,
	// none leased, while the recorder takes jobs only when asked, make
	// GetQueue call the stage stalled: no inventory is leasing.
	LeaseInterval = time.Minute
	// MaxLeaseIDBytes bounds a lease id (ids handed out are 32 hex digits).
	MaxLeaseIDBytes = 64
	// MaxRecordingMessageBytes bounds a Fail message.
	MaxRecordingMessageBytes = 4096
)

// Validate checks the wait and the lease duration.
func (r *LeaseRequest) Validate() error {
	if r.GetWait() != nil {
		w, err := duration("wait", r.GetWait())
		if err != nil {
			return err
		}
		if w < 0 || w > MaxLeaseWait {
			return fmt.Errorf("wait %s is outside 0..%s", w, MaxLeaseWait)
		}
	}
	return validLeaseDuration(r.GetLeaseDuration())
}

// Validate checks the lease id and the lease duration.
func (r *RenewRequest) Validate() error {
	if err := validLeaseID(r.GetLeaseId()); err != nil {
		return err
	}
	return validLeaseDuration(r.GetLeaseDuration())
}

// Validate checks the lease id.
func (r *CompleteRequest) Validate() error { return validLeaseID(r.GetLeaseId()) }

// Validate checks the lease id and requires a message.
func (r *FailRequest) Validate() error {
	if err := validLeaseID(r.GetLeaseId()); err != nil {
		return err
	}
	switch m := r.GetMessage(); {
	case m == "":
		return fmt.Errorf("message is required: say what failed")
	case len(m) > MaxRecordingMessageBytes:
		return fmt.Errorf("message is %d bytes, at most %d allowed", len(m), MaxRecordingMessageBytes)
	}
	return nil
}

func validLeaseID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("lease_id is required")
	case len(id) > MaxLeaseIDBytes:
		return fmt.Errorf("lease_id is %d bytes, at most %d allowed", len(id), MaxLeaseIDBytes)
	}
	return nil
}

// validLeaseDuration accepts an unset duration (the server's default) or
// one within MinLeaseDuration..MaxLeaseDuration.
func validLeaseDuration(d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	v, err := duration("lease_duration", d)
	if err != nil {
		return err
	}
	if v < MinLeaseDuration || v > MaxLeaseDuration {
		return fmt.Errorf("lease_duration %s is outside %s..%s", v, MinLeaseDuration, MaxLeaseDuration)
	}
	return nil
}

func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d.AsDuration(), nil
}
