package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// grpcurlCommand matches one command of docs/admin.md: its optional -d body
// and the method it calls.
var grpcurlCommand = regexp.MustCompile(`(?s)grpcurl -plaintext(.*?)\$B (ingestq\.v1\.\w+)/(\w+)`)

// TestAdminDocCommandsCallRealMethodsWithValidBodies reads every grpcurl
// command of docs/admin.md and checks that the method exists, that its
// JSON body parses as the method's request, that the request passes the
// server's validation, and that admin methods are shown with the token.
func TestAdminDocCommandsCallRealMethodsWithValidBodies(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "admin.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]protoreflect.FileDescriptor{
		"BatchService": v1.File_ingestq_v1_batch_service_proto,
		"AdminService": v1.File_ingestq_v1_admin_service_proto,
	}
	shown := map[string]bool{}
	matches := grpcurlCommand.FindAllStringSubmatch(string(doc), -1)
	for _, m := range matches {
		flags, service, method := m[1], strings.TrimPrefix(m[2], "ingestq.v1."), m[3]
		t.Run(service+"/"+method, func(t *testing.T) {
			fd, ok := files[service]
			if !ok {
				t.Fatalf("unknown service %s", service)
			}
			md := fd.Services().ByName(protoreflect.Name(service)).Methods().ByName(protoreflect.Name(method))
			if md == nil {
				t.Fatalf("%s has no method %s", service, method)
			}
			shown[service+"/"+method] = true
			if service == "AdminService" && !strings.Contains(flags, `-H "authorization: Bearer $TOKEN"`) {
				t.Errorf("admin method shown without the token")
			}
			body := "{}"
			if _, after, ok := strings.Cut(flags, "-d '"); ok {
				body, _, _ = strings.Cut(after, "'")
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				t.Fatal(err)
			}
			req := mt.New().Interface()
			if err := protojson.Unmarshal([]byte(body), req); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			// The server's validation interceptor calls the same Validate.
			if v, ok := req.(interface{ Validate() error }); ok {
				if err := v.Validate(); err != nil {
					t.Errorf("body %s is refused: %v", body, err)
				}
			}
		})
	}
	for _, service := range []string{"BatchService", "AdminService"} {
		methods := files[service].Services().ByName(protoreflect.Name(service)).Methods()
		for i := range methods.Len() {
			if name := service + "/" + string(methods.Get(i).Name()); !shown[name] {
				t.Errorf("docs/admin.md shows no grpcurl command for %s", name)
			}
		}
	}
}
