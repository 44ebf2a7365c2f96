package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestLoggerPutsTraceAndJobIDsOfTheContextInJSONLines(t *testing.T) {
	tracer, _ := newTestTracer(t)
	jobCtx, span := StartJobSpan(context.Background(), tracer, "estimating", testJID, testBID, "")
	defer span.End()
	traceID := span.SpanContext().TraceID().String()
	spanID := span.SpanContext().SpanID().String()

	tests := []struct {
		name string
		ctx  context.Context
		// decorate stands for a logger a service derived with With or WithGroup.
		decorate func(*slog.Logger) *slog.Logger
		want     map[string]string // top-level keys; "" means absent
		// pathGroup is the group the record's own "path" attribute is in.
		pathGroup string
	}{
		{
			name: "plain context adds nothing",
			ctx:  context.Background(),
			want: map[string]string{LogKeyTraceID: "", LogKeySpanID: "", LogKeyJobID: "", LogKeyBatchID: ""},
		},
		{
			name: "WithJob alone adds job and batch ids",
			ctx:  WithJob(context.Background(), testJID, testBID),
			want: map[string]string{LogKeyTraceID: "", LogKeySpanID: "", LogKeyJobID: testJID, LogKeyBatchID: testBID},
		},
		{
			name: "job span adds all four",
			ctx:  jobCtx,
			want: map[string]string{LogKeyTraceID: traceID, LogKeySpanID: spanID, LogKeyJobID: testJID, LogKeyBatchID: testBID},
		},
		{
			name:     "logger With attributes keeps them and adds all four",
			ctx:      jobCtx,
			decorate: func(l *slog.Logger) *slog.Logger { return l.With("stage", "estimating") },
			want:     map[string]string{"stage": "estimating", LogKeyTraceID: traceID, LogKeyJobID: testJID},
		},
		{
			name:      "logger WithGroup still puts the ids at the top level",
			ctx:       jobCtx,
			decorate:  func(l *slog.Logger) *slog.Logger { return l.With("stage", "estimating").WithGroup("zk") },
			want:      map[string]string{"stage": "estimating", LogKeyTraceID: traceID, LogKeySpanID: spanID, LogKeyJobID: testJID, LogKeyBatchID: testBID},
			pathGroup: "zk",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			logger := NewLogger(&out, slog.LevelInfo)
			if tt.decorate != nil {
				logger = tt.decorate(logger)
			}
			logger.InfoContext(tt.ctx, "job step done", "path", "/jobs/"+testJID)

			var line map[string]any
			if err := json.Unmarshal(out.Bytes(), &line); err != nil {
				t.Fatalf("log line %q is not JSON: %v", out.String(), err)
			}
			if line["msg"] != "job step done" {
				t.Errorf("msg = %v, want %q", line["msg"], "job step done")
			}
			attrs := line
			if tt.pathGroup != "" {
				attrs, _ = line[tt.pathGroup].(map[string]any)
			}
			if attrs["path"] != "/jobs/"+testJID {
				t.Errorf("path not in group %q: %s", tt.pathGroup, out.String())
			}
			for key, want := range tt.want {
				got, present := line[key]
				switch {
				case want == "" && present:
					t.Errorf("%s = %v, want absent", key, got)
				case want != "" && got != want:
					t.Errorf("%s = %v, want %q", key, got, want)
				}
			}
		})
	}
}

func TestLoggerDropsRecordsBelowItsLevel(t *testing.T) {
	var out bytes.Buffer
	logger := NewLogger(&out, slog.LevelWarn)
	logger.InfoContext(WithJob(context.Background(), testJID, testBID), "quiet")
	if out.Len() != 0 {
		t.Errorf("info line written at warn level: %q", out.String())
	}
}

func TestParseLevelAcceptsSlogLevelNames(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{in: "", want: slog.LevelInfo},
		{in: "debug", want: slog.LevelDebug},
		{in: "INFO", want: slog.LevelInfo},
		{in: "Warn", want: slog.LevelWarn},
		{in: "error", want: slog.LevelError},
		{in: "info+2", want: slog.LevelInfo + 2},
		{in: "verbose", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLevel(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseLevel(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("ParseLevel(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
