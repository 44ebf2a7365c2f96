// Package otlpsink is an OTLP trace receiver on loopback (gRPC), standing in
// for the collector of a tracing dashboard: services export their spans to
// it, a test reads them back.
package otlpsink

import (
	"context"
	"encoding/hex"
	"net"
	"sync"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is what the sink keeps of one received span.
type Span struct {
	Service string // resource attribute service.name
	Name    string
	TraceID string // hex
	SpanID  string
	Parent  string
	Attrs   map[string]string
	// LinkedTraces are the trace ids of the span's links (hex).
	LinkedTraces []string
}

// Sink receives spans on a free loopback port.
type Sink struct {
	collectorpb.UnimplementedTraceServiceServer
	// Endpoint is the OTEL_EXPORTER_OTLP_ENDPOINT value to export to it.
	Endpoint string
	srv      *grpc.Server
	mu       sync.Mutex
	spans    []Span
}

// Start listens on 127.0.0.1.
func Start() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{Endpoint: "http://" + ln.Addr().String(), srv: grpc.NewServer()}
	collectorpb.RegisterTraceServiceServer(s.srv, s)
	go s.srv.Serve(ln)
	return s, nil
}

// Stop stops the receiver.
func (s *Sink) Stop() { s.srv.Stop() }

// Export receives spans from an exporter.
func (s *Sink) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				var linked []string
				for _, l := range sp.GetLinks() {
					linked = append(linked, hex.EncodeToString(l.GetTraceId()))
				}
				s.spans = append(s.spans, Span{
					LinkedTraces: linked,
					Service:      service,
					Name:         sp.GetName(),
					TraceID:      hex.EncodeToString(sp.GetTraceId()),
					SpanID:       hex.EncodeToString(sp.GetSpanId()),
					Parent:       hex.EncodeToString(sp.GetParentSpanId()),
					Attrs:        attrs(sp.GetAttributes()),
				})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far that match keep.
func (s *Sink) Spans(keep func(Span) bool) []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, sp := range s.spans {
		if keep(sp) {
			out = append(out, sp)
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}
