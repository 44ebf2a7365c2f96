package console

import (
	"context"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// validator is a request with the hand-written Validate of proto/ingestq/v1.
type validator interface{ Validate() error }

// call runs one AdminService method in process, with the check the gRPC
// server's validation interceptor would make first: a request it refuses
// is InvalidArgument with the same message.
func call[Req validator, Resp any](ctx context.Context, req Req, method func(context.Context, Req) (Resp, error)) (Resp, error) {
	if err := req.Validate(); err != nil {
		var zero Resp
		return zero, status.Error(codes.InvalidArgument, err.Error())
	}
	return method(ctx, req)
}

// httpStatus is the HTTP answer to an admin refusal.
func httpStatus(code codes.Code) int {
	switch code {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// refusal is an admin error as the operator sees it.
type refusal struct {
	HTTP    int
	Code    string // the gRPC code's name: what a grpcurl user would see
	Message string
}

func refusalOf(err error) refusal {
	st := status.Convert(err)
	return refusal{HTTP: httpStatus(st.Code()), Code: st.Code().String(), Message: st.Message()}
}
