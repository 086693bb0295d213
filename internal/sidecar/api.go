package sidecar

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
)

// Handler serves the sidecar's HTTP API:
//
//	GET  /metrics        Prometheus exposition of the sweep's and the storage's metrics
//	GET  /healthz        the process is up
//	GET  /readyz         storage answers and a shard assignment is known
//	PUT  /v1/assignment  {"shard_count":N,"shards":[…],"lease_seconds":S}
//	PUT  /v1/residency   {"agents":["component:name",…]} — the full resident set
//	POST /v1/sweep       one tick now; its report
//	GET  /v1/status      last report, passes, backoff, tracked agents, the feed
//
// Write endpoints take a bearer token when one is configured (always, when the listener is not a
// loopback address); bodies are limited to http.max_body_bytes.
func (s *Sidecar) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("PUT /v1/assignment", s.write(s.putAssignment))
	mux.HandleFunc("PUT /v1/residency", s.write(s.putResidency))
	mux.HandleFunc("POST /v1/sweep", s.write(s.postSweep))
	mux.HandleFunc("GET /v1/status", s.getStatus)
	return mux
}

// apiError is an error with the status it answers.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// write wraps a write endpoint: the token, the body limit, and errors as JSON.
func (s *Sidecar) write(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if token := s.cfg.HTTP.Token; token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a bearer token is required"})
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.HTTP.MaxBodyBytes)
		if err := h(w, r); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
			}
			writeJSON(w, ae.status, map[string]string{"error": ae.msg})
		}
	}
}

// decode reads one JSON object into v strictly: unknown fields, trailing data and an oversized body are
// errors that say what was wrong.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes (http.max_body_bytes)", tooLarge.Limit)}
	case errors.Is(err, io.EOF):
		return badRequest("bad JSON: empty body")
	}
	return badRequest("bad JSON: %v", err)
}

type assignmentBody struct {
	ShardCount   *int  `json:"shard_count"`
	Shards       []int `json:"shards"`
	LeaseSeconds int64 `json:"lease_seconds"`
}

func (s *Sidecar) putAssignment(w http.ResponseWriter, r *http.Request) error {
	var body assignmentBody
	if err := decode(r, &body); err != nil {
		return err
	}
	a, err := body.assignment(s.now())
	if err != nil {
		return err
	}
	s.feed.setAssignment(a)
	s.log.Info("shard assignment", "shard_count", a.ShardCount, "shards", a.Shards, "lease_until", a.LeaseUntil)
	writeJSON(w, http.StatusOK, s.feed.status().Assignment)
	return nil
}

// assignment validates the body as sweeper.NewAssignment does (shard_count 0 to sweeper.MaxShardCount,
// shards distinct and within it), after checking what only the body can get wrong: shard_count
// missing, and lease_seconds outside 0 (none: the assignment never lapses) to sweeper.MaxLease, checked
// before it is multiplied into a duration that would wrap.
func (b assignmentBody) assignment(now time.Time) (sweeper.Assignment, error) {
	if b.ShardCount == nil {
		return sweeper.Assignment{}, badRequest("shard_count is required")
	}
	if maxSeconds := int64(sweeper.MaxLease / time.Second); b.LeaseSeconds < 0 || b.LeaseSeconds > maxSeconds {
		return sweeper.Assignment{}, badRequest("lease_seconds %d: want 0 (no lease) to %d", b.LeaseSeconds, maxSeconds)
	}
	a, err := sweeper.NewAssignment(*b.ShardCount, b.Shards, time.Duration(b.LeaseSeconds)*time.Second, now)
	if err != nil {
		return sweeper.Assignment{}, badRequest("%v", err)
	}
	return a, nil
}

type residencyBody struct {
	Agents []string `json:"agents"`
}

func (s *Sidecar) putResidency(w http.ResponseWriter, r *http.Request) error {
	var body residencyBody
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Agents == nil {
		return badRequest(`agents is required (an empty list means nothing is resident)`)
	}
	agents := make(map[oplog.AgentID]struct{}, len(body.Agents))
	for i, key := range body.Agents {
		a, err := oplog.ParseAgentKey(key)
		if err != nil {
			return badRequest("agents[%d]: %v", i, err)
		}
		agents[a] = struct{}{}
	}
	s.feed.setResidency(agents)
	writeJSON(w, http.StatusOK, s.feed.status().Residency)
	return nil
}

func (s *Sidecar) postSweep(w http.ResponseWriter, _ *http.Request) error {
	// The tick belongs to the sidecar, not to the request: a client that hangs up does not cut it.
	rep := s.sweeper.SweepOnce(s.baseCtx)
	writeJSON(w, http.StatusOK, ReportJSON(rep))
	return nil
}

func (s *Sidecar) getStatus(w http.ResponseWriter, _ *http.Request) {
	st := s.sweeper.Status()
	var current any // null between ticks
	if st.Current != nil {
		current = map[string]any{"start": st.Current.Start, "age_seconds": s.now().Sub(st.Current.Start).Seconds(),
			"phase": st.Current.Phase, "route": st.Current.Route,
			"agents_started": st.Current.Started, "agents_done": st.Current.Done}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"sweep": map[string]any{
			"enabled":           s.cfg.Sweep.Enabled,
			"routes":            s.sweeper.Routes(),
			"current":           current,
			"last":              ReportJSON(st.Last),
			"passes":            st.Passes,
			"tracked_agents":    st.Tracked,
			"deadline_hits":     st.DeadlineHits,
			"next_wait_seconds": st.NextWait.Seconds(),
			"standing_down":     st.StandDownReason,
			"unreadable":        orEmpty(st.Unreadable),
		},
		"feed":    s.feed.status(),
		"storage": s.storageStatus(),
	})
}

func (s *Sidecar) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.storage.Exists(ctx, "strata", "readyz"); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "storage: " + err.Error()})
		return
	}
	if _, known := s.feed.shards(); !known {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "no shard assignment yet (PUT /v1/assignment)"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// writeJSON answers v as JSON, every secret in it (a URL or an error that echoes one) redacted.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a URL's & stays an &, so redaction sees where a query value ends
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		status, buf = http.StatusInternalServerError, strings.Builder{}
		fmt.Fprintf(&buf, "{\"error\": %q}\n", "encoding the answer: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, redact.String(buf.String())) // the client may have gone; nothing to do about it
}

// ReportJSON is a tick's report as the API and `strata sweep --json` show it.
func ReportJSON(rep sweeper.Report) map[string]any {
	routes := make([]map[string]any, 0, len(rep.Routes))
	for _, rr := range rep.Routes {
		archived := make([]string, 0, len(rr.Archived))
		for _, a := range rr.Archived {
			archived = append(archived, a.Key())
		}
		routes = append(routes, map[string]any{
			"route": rr.Route, "outcomes": rr.Outcomes, "scanned": rr.Scanned, "pages": rr.Pages,
			"pass_completed": rr.PassCompleted, "truncated": rr.Truncated, "errors": rr.Errors,
			"moved_entries": rr.Moved, "moved_bytes": rr.Bytes, "archived": archived,
			"unreadable": orEmpty(rr.Unreadable),
		})
	}
	return map[string]any{
		"start": rep.Start, "duration_seconds": rep.Duration.Seconds(), "disabled": rep.Disabled,
		"stand_down_reason": rep.StandDownReason,
		"stood_down":        rep.StoodDown, "unassigned": rep.Unassigned, "unassigned_reason": rep.UnassignedReason,
		"outcomes": rep.Outcomes, "truncated": rep.Truncated, "deadline_hit": rep.DeadlineHit,
		"deadline_hits": rep.DeadlineHits, "next_wait_seconds": rep.NextWait.Seconds(), "tracked_agents": rep.Tracked,
		"routes": routes,
	}
}

// orEmpty shows a nil list as [] rather than null.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
