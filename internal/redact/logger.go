package redact

import (
	"fmt"

	"github.com/go-logr/logr"
)

// Logger returns log with every message and value redacted (String) before
// it is written: a process's log is read by people, log collectors and,
// for the deployer's Jobs, sync's web page. Strings, errors, fmt.Stringers
// and byte slices are redacted; other values are written as they are.
func Logger(log logr.Logger, secrets ...string) logr.Logger {
	if log.GetSink() == nil {
		return log
	}
	next := log.GetSink()
	// One frame more between the caller and the sink underneath.
	if d, ok := next.(logr.CallDepthLogSink); ok {
		next = d.WithCallDepth(1)
	}
	return log.WithSink(&sink{next: next, secrets: secrets})
}

type sink struct {
	next    logr.LogSink
	secrets []string
}

func (s *sink) Init(info logr.RuntimeInfo) { s.next.Init(info) }

func (s *sink) Enabled(level int) bool { return s.next.Enabled(level) }

func (s *sink) Info(level int, msg string, kv ...any) {
	s.next.Info(level, String(msg, s.secrets...), s.values(kv)...)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	s.next.Error(Error(err, s.secrets...), String(msg, s.secrets...), s.values(kv)...)
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{next: s.next.WithValues(s.values(kv)...), secrets: s.secrets}
}

func (s *sink) WithName(name string) logr.LogSink {
	return &sink{next: s.next.WithName(name), secrets: s.secrets}
}

// WithCallDepth keeps the caller's file and line right when the sink
// underneath reports them.
func (s *sink) WithCallDepth(depth int) logr.LogSink {
	if d, ok := s.next.(logr.CallDepthLogSink); ok {
		return &sink{next: d.WithCallDepth(depth), secrets: s.secrets}
	}
	return s
}

func (s *sink) values(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		if i%2 == 0 {
			out[i] = v // a key
			continue
		}
		out[i] = s.value(v)
	}
	return out
}

func (s *sink) value(v any) any {
	switch x := v.(type) {
	case string:
		return String(x, s.secrets...)
	case error:
		return Error(x, s.secrets...)
	case []byte:
		return String(string(x), s.secrets...)
	case logr.Marshaler:
		return v
	case fmt.Stringer:
		if r := String(x.String(), s.secrets...); r != x.String() {
			return r
		}
	}
	return v
}
