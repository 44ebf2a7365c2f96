package server

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Invalid UTF-8 in a request's string field is the caller's mistake and
// must be answered InvalidArgument naming the field. gRPC's proto codec
// refuses it while decoding, before any interceptor runs, and gRPC answers
// that with Internal. So the server decodes requests with requestCodec,
// which keeps such strings as they came, and checkUTF8 (in the interceptor
// chain, before each request's Validate) refuses them: one check over
// every string field of every request, whatever its type.

// requestCodec is gRPC's proto codec, except that a message that fails to
// decode only because a string field is not UTF-8 is decoded anyway, the
// bytes kept in the field.
type requestCodec struct {
	strict encoding.CodecV2
	// lenient holds, per message type, its descriptor with every string
	// field turned to bytes (built on first need).
	lenient sync.Map // protoreflect.FullName → protoreflect.MessageDescriptor
}

func newRequestCodec() *requestCodec {
	return &requestCodec{strict: encoding.GetCodecV2(grpcproto.Name)}
}

func (c *requestCodec) Name() string { return grpcproto.Name }

func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.strict.Marshal(v) }

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.strict.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if c.unmarshalLenient(buf.ReadOnlyData(), m) != nil {
		return err // not a UTF-8 matter: the strict decoder's reason stands
	}
	return nil
}

// unmarshalLenient decodes b into m as its lenient twin, then copies the
// fields over, strings from bytes.
func (c *requestCodec) unmarshalLenient(b []byte, m proto.Message) error {
	md, err := c.lenientDescriptor(m.ProtoReflect().Descriptor())
	if err != nil {
		return err
	}
	twin := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, twin); err != nil {
		return err
	}
	proto.Reset(m)
	copyFields(m.ProtoReflect(), twin)
	return nil
}

func (c *requestCodec) lenientDescriptor(md protoreflect.MessageDescriptor) (protoreflect.MessageDescriptor, error) {
	if d, ok := c.lenient.Load(md.FullName()); ok {
		return d.(protoreflect.MessageDescriptor), nil
	}
	// The message's file and all it imports, dependencies first, each
	// with its string fields turned to bytes (the wire format is the
	// same; only the UTF-8 check differs).
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		fp := protodesc.ToFileDescriptorProto(f)
		stringsAsBytes(fp.GetMessageType())
		set.File = append(set.File, fp)
	}
	add(md.ParentFile())
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("lenient descriptor of %s: %w", md.FullName(), err)
	}
	d, err := files.FindDescriptorByName(md.FullName())
	if err != nil {
		return nil, fmt.Errorf("lenient descriptor of %s: %w", md.FullName(), err)
	}
	lmd, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("lenient descriptor of %s: not a message", md.FullName())
	}
	c.lenient.Store(md.FullName(), lmd)
	return lmd, nil
}

// stringsAsBytes turns the string fields of msgs and their nested messages
// into bytes fields; a map's key stays a string (bytes cannot be a key).
func stringsAsBytes(msgs []*descriptorpb.DescriptorProto) {
	for _, m := range msgs {
		for _, f := range m.GetField() {
			if f.GetType() == descriptorpb.FieldDescriptorProto_TYPE_STRING && !(m.GetOptions().GetMapEntry() && f.GetNumber() == 1) {
				f.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
			}
		}
		stringsAsBytes(m.GetNestedType())
	}
}

// copyFields sets dst's fields from src, its lenient twin (field numbers
// match; strings come as bytes).
func copyFields(dst, src protoreflect.Message) {
	fields := dst.Descriptor().Fields()
	src.Range(func(sfd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fd := fields.ByNumber(sfd.Number())
		if fd == nil {
			return true
		}
		switch {
		case fd.IsList():
			list, from := dst.Mutable(fd).List(), v.List()
			for i := range from.Len() {
				list.Append(copyValue(fd, from.Get(i), list.NewElement))
			}
		case fd.IsMap():
			m := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				m.Set(k, copyValue(fd.MapValue(), mv, m.NewValue))
				return true
			})
		default:
			dst.Set(fd, copyValue(fd, v, func() protoreflect.Value { return dst.NewField(fd) }))
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
}

func copyValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, newMessage func() protoreflect.Value) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(v.Bytes()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		out := newMessage()
		copyFields(out.Message(), v.Message())
		return out
	}
	return v
}

// invalidUTF8 returns the path of the first string field of m that is not
// valid UTF-8 ("metadata.who", "files[2].name", `labels["k"]`).
func invalidUTF8(m protoreflect.Message) (string, bool) {
	var bad string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := fd.TextName()
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				if p, ok := invalidValue(fd, list.Get(i)); ok {
					bad = name + "[" + strconv.Itoa(i) + "]" + p
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if s, ok := k.Interface().(string); ok && !utf8.ValidString(s) {
					bad = name + " (a key)"
					return false
				}
				if p, ok := invalidValue(fd.MapValue(), mv); ok {
					bad = name + "[" + strconv.Quote(k.String()) + "]" + p
					return false
				}
				return true
			})
			return bad == ""
		default:
			if p, ok := invalidValue(fd, v); ok {
				bad = name + p
				return false
			}
		}
		return true
	})
	return bad, bad != ""
}

// invalidValue reports a value that is, or holds, invalid UTF-8, with the
// path below it ("" for the value itself, ".who" inside a message).
func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "", !utf8.ValidString(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if p, ok := invalidUTF8(v.Message()); ok {
			return "." + p, true
		}
	}
	return "", false
}

// checkUTF8 refuses a request with a string field that is not valid UTF-8.
func checkUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if field, bad := invalidUTF8(m.ProtoReflect()); bad {
		return status.Errorf(codes.InvalidArgument, "%s is not valid UTF-8", field)
	}
	return nil
}

func utf8UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := checkUTF8(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func utf8StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, utf8Stream{ss})
}

// utf8Stream checks each message the handler receives.
type utf8Stream struct{ grpc.ServerStream }

func (s utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkUTF8(m)
}
