package ingestqv1

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Limits of admin requests.
const (
	MaxCollectionBytes     = 200
	MaxAdminMessageBytes   = 1024
	MaxBatchPageSize       = 500
	MaxJobPageSize         = 1000
	MaxPageTokenBytes      = 256
	MaxJobPriority         = 99
	maxSubmitterFilterSize = MaxSubmitterBytes
)

// The methods without arguments accept every request.

// Validate accepts every request: PauseQueue has no fields.
func (r *PauseQueueRequest) Validate() error { return nil }

// Validate accepts every request: UnpauseQueue has no fields.
func (r *UnpauseQueueRequest) Validate() error { return nil }

// Validate accepts every request: GetQueue has no fields.
func (r *GetQueueRequest) Validate() error { return nil }

// Validate accepts every request: ListWorkers has no fields.
func (r *ListWorkersRequest) Validate() error { return nil }

// Validate accepts every request: repair is a flag.
func (r *FsckRequest) Validate() error { return nil }

// Validate checks the collection mnemonic.
func (r *HoldCollectionRequest) Validate() error { return validCollection(r.GetCollection()) }

// Validate checks the collection mnemonic.
func (r *ReleaseCollectionRequest) Validate() error { return validCollection(r.GetCollection()) }

// Validate checks the bid.
func (r *ReleaseBatchRequest) Validate() error { return validBatchID("batch_id", r.GetBatchId()) }

// Validate checks the bid.
func (r *UpdateReportBatchRequest) Validate() error { return validBatchID("batch_id", r.GetBatchId()) }

// Validate checks the bid.
func (r *DeleteBatchRequest) Validate() error { return validBatchID("batch_id", r.GetBatchId()) }

// CleanupBatchesDefault is CleanupBatches' max_batches when none is given.
const CleanupBatchesDefault = 100

// Validate requires older_than (an empty request must not mean "every
// completed batch") and a max_batches of 0 (the default) or more.
func (r *CleanupBatchesRequest) Validate() error {
	d := r.GetOlderThan()
	switch {
	case d == nil:
		return errors.New(`older_than is required: completed batches at least that old are removed ("0s": all of them)`)
	case d.CheckValid() != nil || d.AsDuration() < 0:
		return fmt.Errorf("older_than %v: want a duration of 0s or more", d.AsDuration())
	case r.GetMaxBatches() < 0:
		return fmt.Errorf("max_batches %d: want 1 or more (0: %d)", r.GetMaxBatches(), CleanupBatchesDefault)
	}
	return nil
}

// Validate requires exactly one well-formed selector.
func (r *GetBatchRequest) Validate() error {
	return validBatchSelector(r.GetBatchId(), r.GetBatchUuid(), r.GetBatch() != nil)
}

// Validate checks the filters and paging.
func (r *ListBatchesRequest) Validate() error {
	if _, ok := BatchState_name[int32(r.GetStatus())]; !ok {
		return fmt.Errorf("status %d is not a batch state", r.GetStatus())
	}
	if err := optionalText("submitter", r.GetSubmitter(), maxSubmitterFilterSize); err != nil {
		return err
	}
	if err := validPaging(r.GetPageSize(), MaxBatchPageSize, r.GetPageToken()); err != nil {
		return err
	}
	if t := r.GetPageToken(); t != "" {
		return validBatchID("page_token", t)
	}
	return nil
}

// Validate checks the jid.
func (r *GetJobRequest) Validate() error { return validJobID("job_id", r.GetJobId()) }

// Validate checks the selectors and paging.
func (r *ListJobsRequest) Validate() error {
	if _, ok := JobState_name[int32(r.GetState())]; !ok {
		return fmt.Errorf("state %d is not a job state", r.GetState())
	}
	if r.GetState() != JobState_JOB_STATE_UNSPECIFIED && r.GetBatchId() != "" {
		return errors.New("state and batch_id select jobs in two different orders: give one of them")
	}
	if r.GetBatchId() != "" {
		if err := validBatchID("batch_id", r.GetBatchId()); err != nil {
			return err
		}
	}
	return validPaging(r.GetPageSize(), MaxJobPageSize, r.GetPageToken())
}

// Validate checks the jid and the message.
func (r *HoldJobRequest) Validate() error { return validJobAction(r.GetJobId(), r.GetMessage()) }

// Validate checks the jid and the message.
func (r *ReleaseJobRequest) Validate() error { return validJobAction(r.GetJobId(), r.GetMessage()) }

// Validate checks the jid and the message.
func (r *FailJobRequest) Validate() error { return validJobAction(r.GetJobId(), r.GetMessage()) }

// Validate checks the jid, the message and the state to resume at.
func (r *RequeueJobRequest) Validate() error {
	if err := validJobAction(r.GetJobId(), r.GetMessage()); err != nil {
		return err
	}
	switch r.GetState() {
	case JobState_JOB_STATE_UNSPECIFIED, JobState_JOB_STATE_PENDING, JobState_JOB_STATE_ESTIMATING,
		JobState_JOB_STATE_PROVISIONING, JobState_JOB_STATE_DOWNLOADING, JobState_JOB_STATE_PROCESSING,
		JobState_JOB_STATE_STORING, JobState_JOB_STATE_RECORDING, JobState_JOB_STATE_NOTIFY:
		return nil
	}
	return fmt.Errorf("state %s: a failed job resumes at JOB_STATE_PENDING, _ESTIMATING, _PROVISIONING, _DOWNLOADING, _PROCESSING, _STORING, _RECORDING or _NOTIFY", r.GetState())
}

// Validate checks the jid and requires a priority in 0..99.
func (r *ReprioritizeJobRequest) Validate() error {
	if err := validJobID("job_id", r.GetJobId()); err != nil {
		return err
	}
	if r.Priority == nil {
		return errors.New("priority is required (0 first .. 99 last)")
	}
	if p := r.GetPriority(); p < 0 || p > MaxJobPriority {
		return fmt.Errorf("priority %d is outside 0..%d", p, MaxJobPriority)
	}
	return nil
}

// Validate checks the jid.
func (r *DeleteJobRequest) Validate() error { return validJobID("job_id", r.GetJobId()) }

func validCollection(m string) error {
	if err := requiredText("collection", m, MaxCollectionBytes); err != nil {
		return err
	}
	if m == "." || m == ".." {
		return fmt.Errorf("collection %q is not a mnemonic", m)
	}
	for i, r := range m {
		if r == '/' {
			return fmt.Errorf("collection %q contains '/' at byte %d", clip(m), i)
		}
		if ZooKeeperRefuses(r) {
			return fmt.Errorf("collection %q: character %U at byte %d is not allowed (ZooKeeper refuses it in a node name)", clip(m), r, i)
		}
	}
	return nil
}

func validJobAction(jid, message string) error {
	if err := validJobID("job_id", jid); err != nil {
		return err
	}
	return optionalText("message", message, MaxAdminMessageBytes)
}

func validPaging(size, max int32, token string) error {
	if size < 0 || size > max {
		return fmt.Errorf("page_size %d is outside 0..%d (0: the default)", size, max)
	}
	if len(token) > MaxPageTokenBytes {
		return fmt.Errorf("page_token is %d bytes, at most %d allowed", len(token), MaxPageTokenBytes)
	}
	return optionalText("page_token", token, MaxPageTokenBytes)
}

// Validate checks that an ARK is named, and a version number if any.
func (r *VerifyObjectRequest) Validate() error {
	switch ark := r.GetArk(); {
	case ark == "":
		return errors.New("ark: required")
	case len(ark) > 512:
		return errors.New("ark: longer than 512 bytes")
	case !arkPattern.MatchString(ark):
		return fmt.Errorf("ark %q is not an ARK: want ark:/NAAN/name (ark:/99999/fk4abc)", clip(ark))
	}
	if r.GetVersion() < 0 {
		return fmt.Errorf("version: %d is not a version number (1 or more; 0: the latest)", r.GetVersion())
	}
	return nil
}

// arkPattern matches an ARK: "ark:", an optional "/", the NAAN, "/" and
// the name (no white space, no control character).
var arkPattern = regexp.MustCompile(`^ark:/?[0-9a-zA-Z]+/[^\s/][^\s]*$`)

// Validate accepts every request: GetStateRules has no fields.
func (r *GetStateRulesRequest) Validate() error { return nil }

// MaxSignInTTL is the longest a console sign-in may last.
const MaxSignInTTL = 30 * 24 * time.Hour

// Validate requires a ttl of 1s to MaxSignInTTL.
func (r *CreateConsoleSessionRequest) Validate() error {
	d := r.GetTtl()
	switch {
	case d == nil:
		return errors.New("ttl is required: how long the sign-in lasts (43200s: 12 hours)")
	case d.CheckValid() != nil || d.AsDuration() < time.Second || d.AsDuration() > MaxSignInTTL:
		return fmt.Errorf("ttl %v: want 1s to %s", d.AsDuration(), MaxSignInTTL)
	}
	return nil
}

// Validate checks the sign-in's id.
func (r *GetConsoleSessionRequest) Validate() error { return validSignInID(r.GetSessionId()) }

// Validate checks the sign-in's id.
func (r *EndConsoleSessionRequest) Validate() error { return validSignInID(r.GetSessionId()) }

// validSignInID accepts what CreateConsoleSession makes: 16 to 64 letters,
// digits, '-' or '_'.
func validSignInID(id string) error {
	if len(id) < 16 || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return errors.New("session_id: want 16 to 64 letters, digits, '-' or '_'")
	}
	return nil
}
