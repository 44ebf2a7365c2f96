// Package rpcerr turns the queue's errors into gRPC statuses whose code
// tells a client what to do and whose message names the item and its state:
// the one mapping every service's API answers with.
package rpcerr

import (
	"context"
	"errors"
	"strings"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FromQueue maps err (from shared/queue, possibly wrapped) to a status:
//
//	ErrNotFound                 NotFound            "batch bid0000000042 not found"
//	ErrWrongState, Transition…  FailedPrecondition  names the current state
//	ErrCorrupt                  FailedPrecondition  names the node; run Fsck
//	ErrLocked, ErrFenced        Aborted             a consumer is working on it: retry
//	ErrInvalid                  InvalidArgument
//	ErrExists                   AlreadyExists
//	ErrNoSession                Unavailable
//	ZooKeeper connection lost   Unavailable         "…: try again"
//	context ended               Canceled / DeadlineExceeded
//
// Anything else is Internal. A status error passes through unchanged.
func FromQueue(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := err.Error()
	var te *queue.TransitionError
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.Is(err, queue.ErrNotFound):
		return status.Error(codes.NotFound, strings.TrimSuffix(msg, ": "+queue.ErrNotFound.Error())+" not found")
	case errors.As(err, &te):
		return status.Errorf(codes.FailedPrecondition, "%s is %s: %s → %s is not allowed", te.Item, te.From, te.From, te.To)
	case errors.Is(err, queue.ErrWrongState):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, queue.ErrCorrupt):
		return status.Error(codes.FailedPrecondition, msg+" (run AdminService/Fsck)")
	case errors.Is(err, queue.ErrLocked):
		return status.Error(codes.Aborted, msg+": a consumer is working on it now; try again")
	case errors.Is(err, queue.ErrFenced):
		return status.Error(codes.Aborted, msg+"; try again")
	case errors.Is(err, queue.ErrInvalid):
		return status.Error(codes.InvalidArgument, msg)
	case errors.Is(err, queue.ErrExists):
		return status.Error(codes.AlreadyExists, msg)
	case errors.Is(err, queue.ErrNoSession):
		return status.Error(codes.Unavailable, msg)
	case session.Retryable(err):
		// The session lives on; a request was cut off as its client moved
		// to another server.
		return status.Error(codes.Unavailable, msg+": try again")
	}
	return status.Error(codes.Internal, msg)
}
