package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// adminAuth guards the methods whose descriptor carries the ingestq.v1.admin
// option with a bearer token. Every other method is open.
type adminAuth struct {
	// tokenDigest is the SHA-256 of the token, nil when none is configured.
	// Comparing digests takes the same time whatever the presented token's
	// length, which comparing the tokens themselves would not.
	tokenDigest []byte
	// isAdmin caches, per full method name, whether the method is admin.
	isAdmin sync.Map // string → bool
}

func newAdminAuth(token string) *adminAuth {
	a := &adminAuth{}
	if token != "" {
		d := sha256.Sum256([]byte(token))
		a.tokenDigest = d[:]
	}
	return a
}

// authorize is an auth.AuthFunc: missing or malformed credentials on an
// admin method are Unauthenticated, a wrong token is PermissionDenied.
func (a *adminAuth) authorize(ctx context.Context) (context.Context, error) {
	if a.tokenDigest == nil {
		return ctx, nil
	}
	method, _ := grpc.Method(ctx)
	if !a.admin(method) {
		return ctx, nil
	}
	if emptyBearer(ctx) {
		return nil, status.Error(codes.Unauthenticated,
			"admin method: the bearer token sent is empty (a shell variable not set where the command ran?): send authorization: Bearer <admin token>")
	}
	token, err := auth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "admin method: send metadata authorization: Bearer <admin token>")
	}
	presented := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(presented[:], a.tokenDigest) != 1 {
		return nil, status.Error(codes.PermissionDenied, "admin method: the token is not the admin token")
	}
	return ctx, nil
}

// emptyBearer reports whether the call's authorization names the Bearer
// scheme with no token ("Bearer", "Bearer "): what -H "authorization:
// Bearer $TOKEN" sends when TOKEN is not set.
func emptyBearer(ctx context.Context) bool {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	return len(vals) == 1 && strings.EqualFold(strings.TrimSpace(vals[0]), "bearer")
}

// admin reports whether fullMethod ("/pkg.Service/Method") is marked admin,
// looking its descriptor up once.
func (a *adminAuth) admin(fullMethod string) bool {
	if v, ok := a.isAdmin.Load(fullMethod); ok {
		return v.(bool)
	}
	v, _ := a.isAdmin.LoadOrStore(fullMethod, methodIsAdmin(fullMethod))
	return v.(bool)
}

// methodIsAdmin reads the ingestq.v1.admin option of a method from the
// descriptors linked into this binary. A method not found there (health and
// reflection among them) carries no such option.
func methodIsAdmin(fullMethod string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return false
	}
	desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return false
	}
	sd, ok := desc.(protoreflect.ServiceDescriptor)
	if !ok {
		return false
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return false
	}
	return proto.GetExtension(opts, ingestqv1.E_Admin).(bool)
}
