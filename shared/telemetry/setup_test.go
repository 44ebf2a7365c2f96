package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// setOTELEnv clears the OTEL_* variables Setup reads, so a developer's own
// settings cannot leak into a test, and then sets env.
func setOTELEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, name := range []string{
		"OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES",
	} {
		t.Setenv(name, "")
	}
	for name, value := range env {
		t.Setenv(name, value)
	}
}

func TestChooseTraceExportFollowsEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    traceExport
		wantErr bool
	}{
		{name: "no endpoint exports nothing", env: nil, want: exportNone},
		{name: "endpoint defaults to grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, want: exportOTLPGRPC},
		{name: "traces endpoint alone is enough", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, want: exportOTLPGRPC},
		{name: "http/protobuf protocol", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		}, want: exportOTLPHTTP},
		{name: "traces protocol overrides protocol", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
		}, want: exportOTLPHTTP},
		{name: "exporter otlp with endpoint", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
		}, want: exportOTLPGRPC},
		{name: "exporter none wins over endpoint", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
		}, want: exportNone},
		{name: "unknown exporter is an error", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
		{name: "http/json protocol is an error", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
		}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chooseTraceExport(func(name string) string { return tt.env[name] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("chooseTraceExport error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("chooseTraceExport = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSetupCreatesNoSpanExporterUnlessAnEndpointIsSet(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{name: "no endpoint", env: nil},
		{name: "traces exporter none", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setOTELEnv(t, tt.env)
			tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			defer shutdown(t, tel)

			if tel.spanExporter != nil {
				t.Errorf("span exporter = %T, want none", tel.spanExporter)
			}
			// Spans are still real, so log lines get trace ids.
			_, span := tel.TracerProvider.Tracer("test").Start(t.Context(), "work")
			defer span.End()
			if !span.SpanContext().IsValid() {
				t.Error("span context is not valid without an exporter")
			}
		})
	}
}

func TestSetupRejectsUnsupportedTraceExporter(t *testing.T) {
	setOTELEnv(t, map[string]string{"OTEL_TRACES_EXPORTER": "console"})
	if _, err := Setup(t.Context(), "ingestq-test", "v0.0.0"); err == nil {
		t.Fatal("Setup accepted OTEL_TRACES_EXPORTER=console")
	}
}

func TestSetupExportsSpansToTheOTLPEndpointOfTheEnvironment(t *testing.T) {
	tests := []struct {
		name        string
		protocol    string
		startServer func(t *testing.T, received chan<- *coltracepb.ExportTraceServiceRequest) (endpoint string)
		env         map[string]string
		wantService string
	}{
		{name: "grpc", protocol: "grpc", startServer: startGRPCReceiver, wantService: "ingestq-test"},
		{name: "http/protobuf", protocol: "http/protobuf", startServer: startHTTPReceiver, wantService: "ingestq-test"},
		{
			name: "OTEL_SERVICE_NAME renames the service", protocol: "grpc", startServer: startGRPCReceiver,
			env: map[string]string{"OTEL_SERVICE_NAME": "estimator-7"}, wantService: "estimator-7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			received := make(chan *coltracepb.ExportTraceServiceRequest, 16)
			endpoint := tt.startServer(t, received)
			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL": tt.protocol,
			}
			for k, v := range tt.env {
				env[k] = v
			}
			setOTELEnv(t, env)

			tel, err := Setup(t.Context(), "ingestq-test", "v1.2.3")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if tel.spanExporter == nil {
				t.Fatal("no span exporter although OTEL_EXPORTER_OTLP_ENDPOINT is set")
			}
			_, span := StartJobSpan(t.Context(), tel.TracerProvider.Tracer("test"), "estimating", "jid0000000001", "bid0000000001", "")
			span.End()
			shutdown(t, tel) // flushes the batch to the receiver

			var req *coltracepb.ExportTraceServiceRequest
			select {
			case req = <-received:
			case <-time.After(10 * time.Second):
				t.Fatal("the OTLP receiver got no spans")
			}
			spans := exportedSpans(req)
			if len(spans) != 1 || spans[0].GetName() != "estimating jid0000000001" {
				t.Fatalf("exported spans = %v, want one named %q", spanNames(spans), "estimating jid0000000001")
			}
			if got := serviceName(req); got != tt.wantService {
				t.Errorf("service.name = %q, want %q", got, tt.wantService)
			}
		})
	}
}

// traceReceiver is a minimal OTLP trace collector that hands every request on.
type traceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	received chan<- *coltracepb.ExportTraceServiceRequest
}

func (r *traceReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.received <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startGRPCReceiver serves OTLP/gRPC on loopback until the test ends.
func startGRPCReceiver(t *testing.T, received chan<- *coltracepb.ExportTraceServiceRequest) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	server := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(server, &traceReceiver{received: received})
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	t.Cleanup(func() {
		server.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("OTLP gRPC receiver: %v", err)
		}
	})
	return "http://" + listener.Addr().String()
}

// startHTTPReceiver serves OTLP/HTTP protobuf on loopback until the test ends.
func startHTTPReceiver(t *testing.T, received chan<- *coltracepb.ExportTraceServiceRequest) string {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		received <- req
		resp, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(server.Close)
	return server.URL
}

func exportedSpans(req *coltracepb.ExportTraceServiceRequest) []*tracepb.Span {
	var spans []*tracepb.Span
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			spans = append(spans, ss.GetSpans()...)
		}
	}
	return spans
}

func spanNames(spans []*tracepb.Span) []string {
	names := make([]string, 0, len(spans))
	for _, s := range spans {
		names = append(names, s.GetName())
	}
	return names
}

func serviceName(req *coltracepb.ExportTraceServiceRequest) string {
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				return kv.GetValue().GetStringValue()
			}
		}
	}
	return ""
}

func shutdown(t *testing.T, tel *Telemetry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
