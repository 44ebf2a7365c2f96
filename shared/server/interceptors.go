package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/validator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// interceptors returns the unary and stream chains, outermost first:
//
//  1. recovery: outermost, so a panic anywhere (handler or another
//     interceptor) becomes codes.Internal "internal error" and the server
//     stays up; the panic is logged with its stack here, as it never
//     reaches the logging interceptor.
//  2. logging: next, so every call that returns is logged with its code,
//     including those that auth and validation refuse.
//  3. auth: before validation, so an unauthenticated caller of an admin
//     method learns nothing about what a valid request looks like.
//  4. validation: last before the handler, which then sees only requests
//     whose string fields are all valid UTF-8 (checkUTF8, one check for
//     every request type; see requestCodec) and whose Validate() passed
//     (others get codes.InvalidArgument naming the field).
//
// Tracing is not in the chain: the otelgrpc stats handler sees every call
// before and after all of it.
func interceptors(log *slog.Logger, adminToken string) []grpc.ServerOption {
	recoveryOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		log.ErrorContext(ctx, "panic in gRPC call", "grpc.method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	logger := logging.LoggerFunc(func(ctx context.Context, level logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(level), msg, fields...)
	})
	// The start of a call says little that its end does not.
	logOpt := logging.WithLogOnEvents(logging.FinishCall)
	authorize := newAdminAuth(adminToken).authorize
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(recoveryOpt),
			logging.UnaryServerInterceptor(logger, logOpt),
			auth.UnaryServerInterceptor(authorize),
			utf8UnaryInterceptor,
			validator.UnaryServerInterceptor(),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(recoveryOpt),
			logging.StreamServerInterceptor(logger, logOpt),
			auth.StreamServerInterceptor(authorize),
			utf8StreamInterceptor,
			validator.StreamServerInterceptor(),
		),
	}
}
