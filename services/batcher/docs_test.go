package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// grpcurlCommand matches one command to the batcher ($B) in the docs: its
// optional -d body and the method it calls.
var grpcurlCommand = regexp.MustCompile(`(?s)grpcurl -plaintext(.*?)\$B (ingestq\.v1\.\w+)/(\w+)`)

// adminDocs are the documents that show the batcher's methods as grpcurl
// commands: the admin reference, the operating guide and the runbook.
var adminDocs = []string{"admin.md", "operating.md", "runbook.md"}

// TestTheDocsCommandsCallRealMethodsWithValidBodies reads every grpcurl
// command to the batcher in the adminDocs and checks
// that the method exists, that its JSON body parses as the method's
// request, that the request passes the server's validation, and that admin
// methods are shown with the token. docs/admin.md must show every method of
// BatchService and AdminService.
func TestTheDocsCommandsCallRealMethodsWithValidBodies(t *testing.T) {
	files := map[string]protoreflect.FileDescriptor{
		"BatchService": v1.File_ingestq_v1_batch_service_proto,
		"AdminService": v1.File_ingestq_v1_admin_service_proto,
		"PingService":  v1.File_ingestq_v1_ping_proto,
	}
	shown := map[string]bool{}
	for _, name := range adminDocs {
		doc, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { checkCommands(t, files, string(doc), shown, name == "admin.md") })
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

// checkCommands checks the grpcurl commands of one document; those of the
// reference (admin.md) count as shown.
func checkCommands(t *testing.T, files map[string]protoreflect.FileDescriptor, doc string, shown map[string]bool, reference bool) {
	matches := grpcurlCommand.FindAllStringSubmatch(doc, -1)
	if len(matches) == 0 {
		t.Fatal("no grpcurl command to the batcher ($B) found")
	}
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
			if reference {
				shown[service+"/"+method] = true
			}
			if md.Options() != nil && proto.GetExtension(md.Options(), v1.E_Admin).(bool) && !strings.Contains(flags, `-H "authorization: Bearer $TOKEN"`) {
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
}
