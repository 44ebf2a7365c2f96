package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFromQueueGivesEachQueueErrorItsCodeAndAPreciseMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"not found names the id", fmt.Errorf("batch bid0000000042: %w", queue.ErrNotFound), codes.NotFound, "batch bid0000000042 not found"},
		{"a refused transition names the current state", fmt.Errorf("wrapped: %w", &queue.TransitionError{Item: "bid0000000042", From: "Completed", To: "UpdateReporting"}),
			codes.FailedPrecondition, "bid0000000042 is Completed: Completed → UpdateReporting is not allowed"},
		{"wrong state keeps the queue's words", fmt.Errorf("job jid0000000001 is Downloading, not Failed: %w", queue.ErrWrongState),
			codes.FailedPrecondition, "job jid0000000001 is Downloading, not Failed: wrong state"},
		{"locked asks to retry", fmt.Errorf("job jid0000000001 (Downloading): %w", queue.ErrLocked), codes.Aborted,
			"job jid0000000001 (Downloading): locked by another consumer: a consumer is working on it now; try again"},
		{"invalid", fmt.Errorf("%w: priority 150 is outside 0..99", queue.ErrInvalid), codes.InvalidArgument, "invalid argument: priority 150 is outside 0..99"},
		{"exists", fmt.Errorf("batch id u1 was already submitted as bid0000000001: %w", queue.ErrExists), codes.AlreadyExists,
			"batch id u1 was already submitted as bid0000000001: already exists"},
		{"no session", queue.ErrNoSession, codes.Unavailable, "no ZooKeeper session"},
		{"a request cut off with its connection asks to retry", fmt.Errorf("allocating a batch id: %w", zk.ErrConnectionClosed),
			codes.Unavailable, "allocating a batch id: zk: connection closed: try again"},
		{"corrupt points at fsck", &queue.CorruptError{Path: "/jobs/jid0000000001/status", Err: errors.New("bad json")}, codes.FailedPrecondition,
			"/jobs/jid0000000001/status: unreadable: bad json (run AdminService/Fsck)"},
		{"deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "reading: context deadline exceeded"},
		{"anything else is internal", errors.New("boom"), codes.Internal, "boom"},
		{"a status passes through", status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied, "no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(FromQueue(tc.err))
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("got %s %q, want %s %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
	if FromQueue(nil) != nil {
		t.Error("FromQueue(nil) is not nil")
	}
}
