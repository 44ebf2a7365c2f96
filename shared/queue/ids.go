package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
)

// Identifier bookkeeping of ours, outside the spec's paths:
//   /counters/<name>            decimal text: the last number handed out
//   /local-ids/<owner>/<local>  the ARK a depositor's local id is bound to

func validName(kind, s string) error {
	if s == "" || len(s) > 200 || strings.ContainsAny(s, "\x00\n") {
		return fmt.Errorf("%w: %s %q must be 1..200 characters", ErrInvalid, kind, truncate(s, 40))
	}
	return nil
}

// MintFromCounter gives the claimed job a primary id made from the next
// number of a counter, in ONE atomic operation that also records the id in
// the job's identifiers: a step that restarts finds the id already there and
// a number is never used twice. It returns the id (the existing one if the
// job has a primary id already).
func (cl *Claim) MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error) {
	if err := validName("counter", counter); err != nil {
		return "", err
	}
	if id := cl.Job.GetIdentifiers().GetPrimaryId(); id != "" {
		return id, nil
	}
	if err := cl.finish(); err != nil {
		return "", err
	}
	c := cl.c
	cp := c.p.counter(LockName(counter))
	if err := c.ensureOnce(ctx, cp); err != nil {
		return "", err
	}
	idsPath := c.p.jobNode(cl.ID(), nodeIdentifiers)
	for attempt := 0; attempt < 100; attempt++ {
		data, stat, err := c.get(ctx, cp)
		if errors.Is(err, zk.ErrNoNode) {
			// Removed since this client made sure of it.
			if err := c.ensure(ctx, cp); err != nil {
				return "", err
			}
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading counter %s: %w", counter, err)
		}
		var n int64
		if len(data) > 0 {
			if n, err = decodeInt(cp, data); err != nil {
				return "", err
			}
		}
		n++
		id := makeID(n)
		ids := &v1.Identifiers{}
		if cl.Job.GetIdentifiers() != nil {
			ids = proto.Clone(cl.Job.GetIdentifiers()).(*v1.Identifiers)
		}
		ids.PrimaryId = id
		ok, err := cl.has(ctx, nodeIdentifiers)
		if err != nil {
			return "", err
		}
		idsOp := any(c.createOp(idsPath, encodeIdentifiers(ids), 0))
		if ok {
			idsOp = setOp(idsPath, encodeIdentifiers(ids), -1)
		}
		_, err = c.multi(ctx,
			checkOp(c.p.jobStatus(cl.ID()), cl.version),
			checkOp(c.p.jobLock(cl.ID()), -1),
			setOp(cp, encodeInt(n), stat.Version),
			idsOp)
		switch idx := failedOp(err); {
		case err == nil:
			cl.Job.Identifiers = ids
			cl.present[nodeIdentifiers] = true
			return id, nil
		case idx == 0 || idx == 1:
			return "", fmt.Errorf("job %s: %w (%v)", cl.ID(), ErrFenced, err)
		case idx == 2 && errors.Is(err, zk.ErrBadVersion):
			continue // another minter took this number
		case retryable(err):
			// The answer was lost with the connection (a ZooKeeper server
			// went away): the job's identifiers tell whether the number
			// was taken. If not, mint again once reconnected.
			data, _, gerr := c.get(ctx, idsPath)
			if gerr != nil && !errors.Is(gerr, zk.ErrNoNode) {
				return "", fmt.Errorf("minting for job %s: after %v: %w", cl.ID(), err, gerr)
			}
			if gerr == nil {
				if got, derr := decodeIdentifiers(idsPath, data); derr == nil && got.GetPrimaryId() == id {
					cl.Job.Identifiers = ids
					cl.present[nodeIdentifiers] = true
					return id, nil
				}
			}
			continue
		default:
			return "", fmt.Errorf("minting for job %s: %w", cl.ID(), err)
		}
	}
	return "", fmt.Errorf("minting for job %s: counter %s too contended", cl.ID(), counter)
}

// LookupLocalID returns the ARK an owner's local id is bound to (ErrNotFound if none).
func (c *Client) LookupLocalID(ctx context.Context, owner, localID string) (string, error) {
	if err := validName("owner", owner); err != nil {
		return "", err
	}
	if err := validName("local id", localID); err != nil {
		return "", err
	}
	data, _, err := c.get(ctx, c.p.binding(owner, localID))
	if errors.Is(err, zk.ErrNoNode) {
		return "", fmt.Errorf("local id %s of %s: %w", localID, owner, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading local id %s: %w", localID, err)
	}
	return string(data), nil
}

// BindLocalID binds an owner's local id to an ARK. If the local id is bound
// already it returns the ARK it is bound to, which may differ from ark: the
// caller decides what a mismatch means.
func (c *Client) BindLocalID(ctx context.Context, owner, localID, ark string) (string, error) {
	if err := validName("owner", owner); err != nil {
		return "", err
	}
	if err := validName("local id", localID); err != nil {
		return "", err
	}
	if ark == "" {
		return "", fmt.Errorf("%w: empty ARK", ErrInvalid)
	}
	folder := c.p.bindings() + "/" + LockName(owner)
	if err := c.ensureOnce(ctx, folder); err != nil {
		return "", err
	}
	_, err := c.create(ctx, c.p.binding(owner, localID), []byte(ark), 0)
	if errors.Is(err, zk.ErrNoNode) {
		// Removed since this client made sure of it.
		if err = c.ensure(ctx, folder); err == nil {
			_, err = c.create(ctx, c.p.binding(owner, localID), []byte(ark), 0)
		}
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return c.LookupLocalID(ctx, owner, localID)
	}
	if err != nil {
		return "", fmt.Errorf("binding local id %s: %w", localID, err)
	}
	return ark, nil
}
