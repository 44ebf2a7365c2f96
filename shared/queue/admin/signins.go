package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
)

// Operator console sign-ins, ingestq's own area (outside the spec's paths):
//
//	/console-sessions/<id>   decimal text: when the sign-in expires (Unix seconds)
//
// A sign-in is live while its node exists and has not expired. Signing out
// deletes it, so a cookie copied before is refused by every batcher that
// shares the queue, whichever one it is shown to. SignIns.Cleanup
// (the batcher's janitor) removes expired ones.

// MaxSignIns bounds the live sign-ins: a sign-in beyond it is
// refused (ErrExists) until one ends or expires.
const MaxSignIns = 1000

// validSignInID accepts what AdminService's CreateConsoleSession makes: 16 to 64
// letters, digits, '-' or '_'.
func validSignInID(id string) error {
	if len(id) < 16 || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return fmt.Errorf("%w: console session id must be 16..64 letters, digits, '-' or '_'", queue.ErrInvalid)
	}
	return nil
}

// Create records a sign-in that lasts until expires. At
// MaxSignIns it first removes the expired ones, and refuses the
// sign-in (ErrExists) if that leaves no room.
func (t *SignIns) Create(ctx context.Context, id string, expires time.Time) error {
	return t.createSignIn(ctx, id, expires, MaxSignIns)
}

func (t *base) createSignIn(ctx context.Context, id string, expires time.Time, limit int) error {
	if err := validSignInID(id); err != nil {
		return err
	}
	if err := t.z.EnsureOnce(ctx, t.p.Own().SignIns()); err != nil {
		return fmt.Errorf("creating the console sessions folder: %w", err)
	}
	names, _, err := t.z.Children(ctx, t.p.Own().SignIns())
	if err != nil {
		return fmt.Errorf("listing console sessions: %w", err)
	}
	if len(names) >= limit {
		live, err := t.cleanup(ctx, time.Now())
		if err != nil {
			return err
		}
		if live >= limit {
			return fmt.Errorf("%d console sign-ins are live, at most %d: %w", live, limit, queue.ErrExists)
		}
	}
	_, err = t.z.Create(ctx, t.p.Own().SignIn(id), []byte(strconv.FormatInt(expires.Unix(), 10)), 0)
	if err != nil {
		return fmt.Errorf("recording console session: %w", err)
	}
	return nil
}

// Live reports whether a sign-in exists and has not expired
// at now.
func (t *SignIns) Live(ctx context.Context, id string, now time.Time) (bool, error) {
	if validSignInID(id) != nil {
		return false, nil // never one of ours
	}
	data, _, err := t.z.Get(ctx, t.p.Own().SignIn(id))
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading console session: %w", err)
	}
	expires, err := strconv.ParseInt(string(data), 10, 64)
	return err == nil && now.Unix() < expires, nil
}

// End removes a sign-in; one already gone is no error.
func (t *SignIns) End(ctx context.Context, id string) error {
	if err := validSignInID(id); err != nil {
		return err
	}
	err := t.z.Delete(ctx, t.p.Own().SignIn(id), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("ending console session: %w", err)
	}
	return nil
}

// Cleanup removes the sign-ins expired at now (and any node
// there that is not one) and returns how many are still live.
func (t *SignIns) Cleanup(ctx context.Context, now time.Time) (int, error) {
	return t.cleanup(ctx, now)
}

func (t *base) cleanup(ctx context.Context, now time.Time) (int, error) {
	names, _, err := t.z.Children(ctx, t.p.Own().SignIns())
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing console sessions: %w", err)
	}
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = t.p.Own().SignIn(name)
	}
	read, err := t.z.Read(ctx, paths)
	if err != nil {
		return 0, fmt.Errorf("reading console sessions: %w", err)
	}
	live := 0
	for i, r := range read {
		if r.Stat == nil {
			continue // ended meanwhile
		}
		expires, perr := strconv.ParseInt(string(r.Data), 10, 64)
		if perr == nil && now.Unix() < expires {
			live++
			continue
		}
		// The version guards against a node recreated meanwhile (ids are
		// random: only a corrupt one would be).
		err := t.z.Delete(ctx, paths[i], r.Stat.Version)
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return 0, fmt.Errorf("removing expired console session: %w", err)
		}
	}
	return live, nil
}
