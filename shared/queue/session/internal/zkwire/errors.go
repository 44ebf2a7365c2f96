package zkwire

import (
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// FailedAt is where in a multi the operation that failed it stands (-1:
// it failed as a whole, or did not fail): the others of a failed multi
// answer ZooKeeper's "runtime inconsistency", the one that failed its own
// error.
func FailedAt(res []zk.MultiResponse, err error) int {
	if err == nil {
		return -1
	}
	for i, r := range res {
		if r.Error != nil && !inconsistent(r.Error) {
			return i
		}
	}
	return -1
}

// codeError is the error go-zookeeper gives an answer's error code.
func codeError(code int32) error {
	if err, ok := codeErrors[code]; ok {
		return err
	}
	return &unknownCodeError{code: code}
}

// unknownCodeError is an error code go-zookeeper has no error for.
type unknownCodeError struct{ code int32 }

func (e *unknownCodeError) Error() string { return fmt.Sprintf("unknown error: %d", e.code) }

var codeErrors = map[int32]error{
	0:    nil,
	-100: zk.ErrAPIError,
	-101: zk.ErrNoNode,
	-102: zk.ErrNoAuth,
	-103: zk.ErrBadVersion,
	-108: zk.ErrNoChildrenForEphemerals,
	-110: zk.ErrNodeExists,
	-111: zk.ErrNotEmpty,
	-112: zk.ErrSessionExpired,
	-114: zk.ErrInvalidACL,
	-115: zk.ErrAuthFailed,
	-116: zk.ErrClosing,
	-117: zk.ErrNothing,
	-118: zk.ErrSessionMoved,
	-123: zk.ErrReconfigDisabled,
	-8:   zk.ErrBadArguments,
}

// inconsistent reports whether err is the error of an operation of a failed
// multi that did not fail itself.
func inconsistent(err error) bool {
	var u *unknownCodeError
	return errors.As(err, &u) && u.code == codeRuntimeInconsistency
}
