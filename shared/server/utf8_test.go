package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// withRawString sets the string field at path (field names, outermost
// first) of m to b as it goes on the wire, whatever b holds: the Go client
// refuses to send invalid UTF-8 in a string field, a hostile client does
// not. The field travels as an unknown field of m, byte for byte what a
// set field would be.
func withRawString(t *testing.T, m proto.Message, b []byte, path ...string) proto.Message {
	t.Helper()
	md := m.ProtoReflect().Descriptor()
	var nums []protowire.Number
	for i, name := range path {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			t.Fatalf("%s has no field %s", md.FullName(), name)
		}
		nums = append(nums, fd.Number())
		if i < len(path)-1 {
			md = fd.Message()
		}
	}
	wire := protowire.AppendBytes(protowire.AppendTag(nil, nums[len(nums)-1], protowire.BytesType), b)
	for i := len(nums) - 2; i >= 0; i-- {
		wire = protowire.AppendBytes(protowire.AppendTag(nil, nums[i], protowire.BytesType), wire)
	}
	m.ProtoReflect().SetUnknown(append(m.ProtoReflect().GetUnknown(), wire...))
	return m
}

// countingBatchService counts the calls that reach it.
type countingBatchService struct {
	ingestqv1.UnimplementedBatchServiceServer
	calls atomic.Int64
}

func (s *countingBatchService) Submit(context.Context, *ingestqv1.SubmitRequest) (*ingestqv1.SubmitResponse, error) {
	s.calls.Add(1)
	return &ingestqv1.SubmitResponse{BatchId: "bid0000000001"}, nil
}

func (s *countingBatchService) GetBatchStatus(context.Context, *ingestqv1.GetBatchStatusRequest) (*ingestqv1.GetBatchStatusResponse, error) {
	s.calls.Add(1)
	return &ingestqv1.GetBatchStatusResponse{}, nil
}

// TestInvalidUTF8InAStringFieldIsInvalidArgumentNamingIt sends requests
// over a real socket whose string field (at any depth, in a oneof, on a
// stream) is not UTF-8: each is refused with InvalidArgument naming the
// field before the handler runs, not with the Internal that gRPC's own
// decoding answers.
func TestInvalidUTF8InAStringFieldIsInvalidArgumentNamingIt(t *testing.T) {
	batches := &countingBatchService{}
	unary := start(t, Options{}, func(s *Server) {
		ingestqv1.RegisterPingServiceServer(s, newPingService())
		ingestqv1.RegisterBatchServiceServer(s, batches)
	})
	stream := start(t, Options{}, func(s *Server) { s.RegisterService(streamPingDesc(newPingService()), nil) })
	conn, streamConn := dial(t, unary.addr), dial(t, stream.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := []byte("caf\xe9 \xff")
	submit := func() proto.Message {
		return &ingestqv1.SubmitRequest{Submitter: "jdoe", Profile: "demo", PayloadUrl: "https://example.org/a.zip",
			PayloadType: ingestqv1.PayloadType_PAYLOAD_TYPE_FILE}
	}
	for _, tc := range []struct {
		name, method string
		req          proto.Message
		want         string
	}{
		{"a top-level field", "/ingestq.v1.PingService/Ping", withRawString(t, &ingestqv1.PingRequest{}, bad, "message"), "message is not valid UTF-8"},
		{"a field of a nested message", "/ingestq.v1.BatchService/Submit", withRawString(t, submit(), bad, "metadata", "who"), "metadata.who is not valid UTF-8"},
		{"a node-name field", "/ingestq.v1.BatchService/Submit", withRawString(t, submit(), bad, "batch_uuid"), "batch_uuid is not valid UTF-8"},
		{"a oneof member", "/ingestq.v1.BatchService/GetBatchStatus", withRawString(t, &ingestqv1.GetBatchStatusRequest{}, bad, "batch_uuid"), "batch_uuid is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := conn.Invoke(ctx, tc.method, tc.req, &ingestqv1.PingResponse{})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("got %s %q, want InvalidArgument %q", st.Code(), st.Message(), tc.want)
			}
		})
	}
	if n := batches.calls.Load(); n != 0 {
		t.Errorf("%d refused calls reached the handler", n)
	}

	t.Run("a message on a stream", func(t *testing.T) {
		s, err := streamConn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/ingestq.v1.PingService/Ping")
		if err != nil {
			t.Fatal(err)
		}
		s.SendMsg(withRawString(t, &ingestqv1.PingRequest{}, bad, "message"))
		s.CloseSend()
		err = s.RecvMsg(&ingestqv1.PingResponse{})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "message is not valid UTF-8" {
			t.Errorf("got %s %q", st.Code(), st.Message())
		}
	})
	t.Run("a request of the reflection service", func(t *testing.T) {
		s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.SendMsg(withRawString(t, &reflectionpb.ServerReflectionRequest{}, bad, "file_containing_symbol"))
		s.CloseSend()
		_, err = s.Recv()
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "file_containing_symbol is not valid UTF-8" {
			t.Errorf("got %s %q", st.Code(), st.Message())
		}
	})
	t.Run("valid UTF-8 beyond ASCII is answered", func(t *testing.T) {
		got, err := callUnary(ctx, conn, false, "café ✓ 日本")
		if err != nil || got != "café ✓ 日本" {
			t.Errorf("Ping: %q, %v", got, err)
		}
	})
	t.Run("a message that is not protobuf is still refused", func(t *testing.T) {
		garbage := &ingestqv1.PingRequest{}
		garbage.ProtoReflect().SetUnknown([]byte{0x0a, 0x7f, 'x'}) // field 1, 127 bytes announced, 1 given
		err := conn.Invoke(ctx, "/ingestq.v1.PingService/Ping", garbage, &ingestqv1.PingResponse{})
		if status.Code(err) == codes.OK {
			t.Error("a truncated message was answered")
		}
	})
}

// TestEveryServedRequestTypeDecodesLeniently builds the lenient twin of
// the request type of every method ingestq's servers serve (health and
// reflection included) and checks that a request of each, with every
// top-level string field set to invalid UTF-8, decodes and is refused
// naming that field.
func TestEveryServedRequestTypeDecodesLeniently(t *testing.T) {
	c := newRequestCodec()
	seen := 0
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		pkg := string(f.Package())
		if pkg != "ingestq.v1" && pkg != "grpc.health.v1" && pkg != "grpc.reflection.v1" {
			return true
		}
		for i := range f.Services().Len() {
			methods := f.Services().Get(i).Methods()
			for j := range methods.Len() {
				md := methods.Get(j).Input()
				mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
				if err != nil {
					t.Errorf("%s: %v", md.FullName(), err)
					continue
				}
				seen++
				for k := range md.Fields().Len() {
					fd := md.Fields().Get(k)
					if fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
						continue
					}
					wire := protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), []byte("\xff"))
					m := mt.New().Interface()
					if err := c.unmarshalLenient(wire, m); err != nil {
						t.Errorf("%s: %v", md.FullName(), err)
						continue
					}
					if err := checkUTF8(m); !strings.HasPrefix(status.Convert(err).Message(), string(fd.Name())+" is not valid UTF-8") {
						t.Errorf("%s.%s: %v", md.FullName(), fd.Name(), err)
					}
				}
			}
		}
		return true
	})
	if seen < 30 {
		t.Errorf("only %d request types found: the registry lacks ingestq's services", seen)
	}
}
