package sidecar

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
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
//	DELETE /v1/agents/{key}[?mode=ephemeral|durable]  erase the agent from every layer; what went
//
// The write endpoints and GET /v1/status take a bearer token when one is configured (always, when the
// listener is not a loopback address); the probes and /metrics never do. Bodies are JSON
// (Content-Type application/json, or none: anything else is 415, so that a browser's form post cannot
// reach them) limited to http.max_body_bytes, and must arrive within http.body_timeout (408 after
// it). A request must name a loopback host (localhost,
// 127.0.0.0/8, ::1) or the listener's own in its Host header, else 421: a page whose name an attacker
// rebinds to 127.0.0.1 cannot reach a token-less sidecar (a wildcard listener has no Host check).
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
	mux.HandleFunc("GET /v1/status", s.authorized(s.getStatus))
	mux.HandleFunc("DELETE /v1/agents/{key...}", s.write(s.deleteAgent))
	return s.bodyDeadline(s.hostCheck(mux))
}

// bodyDeadline gives a request with a body http.body_timeout to deliver it, counted from when its
// handling starts: a client that trickles its body, or stops sending it, has its reads fail once the
// deadline passes (408, and the server closes the connection), instead of holding a handler for as
// long as it keeps sending. It wraps everything, so a body sent to a path that does not exist (which
// the server drains before reusing the connection) is bounded too. A request without a body has no
// deadline: a long handler (POST /v1/sweep) is not cut by it. Under a server that cannot set
// deadlines (a ResponseRecorder) it does nothing.
func (s *Sidecar) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			s.startBodyDeadline(w)
		}
		next.ServeHTTP(w, r)
	})
}

// startBodyDeadline sets the request's read deadline http.body_timeout from now (the wall clock, not
// s.now, which tests move).
func (s *Sidecar) startBodyDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.HTTP.BodyTimeout))
}

// hostCheck refuses a request whose Host is not a loopback name or address nor the host the listener
// was configured with or bound to: a page whose name an attacker rebinds to the listener's address
// cannot reach it. A wildcard listener (0.0.0.0, ::, no host) does not know its names, so it has no
// Host check; it is off loopback, where the token is mandatory for everything but the probes and
// /metrics.
func (s *Sidecar) hostCheck(next http.Handler) http.Handler {
	host, _, err := net.SplitHostPort(s.cfg.HTTP.Listen)
	if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
		return next
	}
	allowed := map[string]bool{}
	for _, addr := range []string{s.cfg.HTTP.Listen, s.boundAddr} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			allowed[strings.ToLower(host)] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host, allowed) {
			writeJSON(w, http.StatusMisdirectedRequest, map[string]string{
				"error": fmt.Sprintf("Host %q is not this listener's: use localhost, a loopback address or %s", r.Host, s.cfg.HTTP.Listen)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether the Host header hostport names loopback (localhost, a 127.0.0.0/8 or
// ::1 address) or one of allowed. Names are not resolved.
func loopbackHost(hostport string, allowed map[string]bool) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if host == "localhost" || allowed[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

// authorized wraps an endpoint that needs the token, when one is configured.
func (s *Sidecar) authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if token := s.cfg.HTTP.Token; token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a bearer token is required"})
				return
			}
		}
		h(w, r)
	}
}

// write wraps a write endpoint: the token, the body's Content-Type and limit, and errors as JSON.
func (s *Sidecar) write(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.authorized(func(w http.ResponseWriter, r *http.Request) {
		if err := jsonContentType(r); err != nil {
			writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": err.Error()})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.HTTP.MaxBodyBytes)
		if err := h(w, r); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
			}
			writeJSON(w, ae.status, map[string]string{"error": ae.msg})
		}
	})
}

// jsonContentType accepts a request with no Content-Type or application/json (any parameters): the
// types a browser may send across origins without asking (text/plain, a form) are refused.
func jsonContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("Content-Type %q: want application/json", ct)
	}
	return nil
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
	return bodyError(err)
}

// bodyError is a body's decoding error as the API answers it.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	var ae *apiError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.As(err, &tooLarge):
		return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes (http.max_body_bytes)", tooLarge.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{status: http.StatusRequestTimeout, msg: "the body did not arrive within http.body_timeout"}
	case errors.Is(err, io.EOF):
		return badRequest("bad JSON: empty body")
	}
	return badRequest("bad JSON: %v", err)
}

// deleteAgent erases one agent's oplog from every layer (oplog.Stack.Erase) and answers what each
// layer held. The key is the rest of the path, component:name, percent-encoded where it must be (a
// name may hold '/'); the mode is the query's, ephemeral by default. A failure part way is a 500 with
// the error and the layers done so far: the tombstone stays, and the DELETE may be sent again.
func (s *Sidecar) deleteAgent(w http.ResponseWriter, r *http.Request) error {
	agent, err := oplog.ParseAgentKey(r.PathValue("key"))
	if err != nil {
		return badRequest("agent: %v", err)
	}
	query := r.URL.Query()
	for name := range query {
		if name != "mode" {
			return badRequest("unknown query parameter %q: only mode", name)
		}
	}
	mode := oplog.Ephemeral
	if m := query.Get("mode"); m != "" {
		if mode, err = oplog.ParseMode(m); err != nil {
			return badRequest("mode: %v", err)
		}
	}
	erased, err := s.stack.Erase(r.Context(), agent, mode)
	if err != nil {
		s.log.Error("erase failed part way; its tombstone stays until an erase of the agent finishes",
			"agent", agent.Key(), "mode", mode, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error(), "erased": erased})
		return nil
	}
	s.log.Info("agent erased", "agent", agent.Key(), "mode", mode, "entries", erased.Entries())
	writeJSON(w, http.StatusOK, erased)
	return nil
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

func (s *Sidecar) putResidency(w http.ResponseWriter, r *http.Request) error {
	// One feed at a time, so that memory holds one set being read beside the one in force. A PUT that
	// arrives while another is read waits its turn, in arrival order, and lands after it: sets land in
	// the order they were sent, so the newest is the one in force. The one being read finishes, or is
	// cut by its body deadline, within http.body_timeout, so the PUT next in line always gets its turn
	// within its wait of twice that: a slow client ahead of the executor's PUT delays it by the body
	// deadline at most, and never refuses it. Only a PUT still waiting behind several others at the
	// end of its wait is refused, 409: retry.
	if err := s.awaitResidencyTurn(r); err != nil {
		return err
	}
	defer func() { <-s.residencyTurn }()
	// The body's deadline runs from its turn, not from its arrival: the wait is not the client's doing.
	s.startBodyDeadline(w)
	agents, err := decodeResidency(r.Body)
	if err != nil {
		return bodyError(err)
	}
	s.feed.setResidency(agents)
	writeJSON(w, http.StatusOK, s.feed.status().Residency)
	return nil
}

// awaitResidencyTurn waits for the PUT being read ahead of r, up to twice http.body_timeout, and then
// holds the turn; the caller gives it back.
func (s *Sidecar) awaitResidencyTurn(r *http.Request) error {
	s.residencyWaiting.Add(1)
	defer s.residencyWaiting.Add(-1)
	wait := time.NewTimer(2 * s.cfg.HTTP.BodyTimeout)
	defer wait.Stop()
	select {
	case s.residencyTurn <- struct{}{}:
		return nil
	case <-wait.C:
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf(
			"other PUT /v1/residency requests were still being read after %s (twice http.body_timeout); retry", 2*s.cfg.HTTP.BodyTimeout)}
	case <-r.Context().Done():
		return &apiError{status: http.StatusServiceUnavailable, msg: "the request ended while it waited its turn"}
	}
}

// decodeResidency reads {"agents":["component:name",…]} token by token, into the set itself: no copy
// of the body or of the list is held, so memory is the feed's (within http.max_body_bytes). Unknown
// fields, a repeated "agents", a bad agent and data after the object are errors.
func decodeResidency(body io.Reader) (map[oplog.AgentID]struct{}, error) {
	dec := json.NewDecoder(body)
	if err := expectDelim(dec, '{', "an object"); err != nil {
		return nil, err
	}
	var agents map[oplog.AgentID]struct{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch key, _ := tok.(string); key {
		case "agents":
			if agents != nil {
				return nil, badRequest(`bad JSON: "agents" given twice`)
			}
			if err := expectDelim(dec, '[', `"agents" as a list`); err != nil {
				return nil, err
			}
			agents = map[oplog.AgentID]struct{}{}
			for i := 0; dec.More(); i++ {
				tok, err := dec.Token()
				if err != nil {
					return nil, err
				}
				str, ok := tok.(string)
				if !ok {
					return nil, badRequest("agents[%d]: want a string, got %v", i, tok)
				}
				a, err := oplog.ParseAgentKey(str)
				if err != nil {
					return nil, badRequest("agents[%d]: %v", i, err)
				}
				agents[a] = struct{}{}
			}
			if _, err := dec.Token(); err != nil { // ]
				return nil, err
			}
		default:
			return nil, badRequest("bad JSON: json: unknown field %q", key)
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, err
	}
	if _, extra := dec.Token(); extra != io.EOF {
		return nil, badRequest("bad JSON: data after the JSON object")
	}
	if agents == nil {
		return nil, badRequest(`agents is required (an empty list means nothing is resident)`)
	}
	return agents, nil
}

// expectDelim reads the next token and fails unless it is delim.
func expectDelim(dec *json.Decoder, delim json.Delim, want string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != delim {
		return badRequest("bad JSON: want %s, got %v", want, tok)
	}
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
			"routes":            routesJSON(s.sweeper.Routes()),
			"current":           current,
			"last":              ReportJSON(st.Last),
			"passes":            st.Passes,
			"tracked_agents":    st.Tracked,
			"deadline_hits":     st.DeadlineHits,
			"next_wait_seconds": st.NextWait.Seconds(),
			"standing_down":     st.StandDownReason,
			"unreadable":        orEmpty(st.Unreadable),
			"unparseable":       orEmpty(st.Unparseable),
			"lag":               lagsJSON(st.Lag, s.now()),
		},
		"feed": s.feed.status(),
		// A PUT /v1/residency being read, and those waiting their turn behind it.
		"residency_puts": map[string]any{"being_read": len(s.residencyTurn) > 0, "waiting": s.residencyWaiting.Load()},
		"storage":        s.storageStatus(),
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
			"unreadable": orEmpty(rr.Unreadable), "unparseable": orEmpty(rr.Unparseable),
			"unarchived": rr.Unarchived, "lag": lagJSON(sweeper.RouteLag{Agents: rr.Unarchived,
				OldestSince: rr.OldestUnarchived, Entries: rr.UnarchivedEntries, Bytes: rr.UnarchivedBytes}), "byte_budget_deferred": rr.ByteBudgetDeferred,
			"byte_budget_wait_seconds": rr.ByteBudgetWait.Seconds(),
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

// lagJSON is a route's backlog after a tick: the agents it holds unarchived, when the oldest of them
// was first sighted (null when none), their entries and estimated bytes.
func lagJSON(lag sweeper.RouteLag) map[string]any {
	var oldest any
	if !lag.OldestSince.IsZero() {
		oldest = lag.OldestSince
	}
	return map[string]any{"agents": lag.Agents, "oldest_first_sighted": oldest, "entries": lag.Entries, "bytes": lag.Bytes}
}

// lagsJSON is every route's backlog as the last tick that swept it measured it, with the oldest's age
// at now (it keeps rising while ticks stand down), as the lag gauges show it; a list in route order.
func lagsJSON(lags map[string]sweeper.RouteLag, now time.Time) []map[string]any {
	out := make([]map[string]any, 0, len(lags))
	for _, route := range slices.Sorted(maps.Keys(lags)) {
		lag := lags[route]
		view := lagJSON(lag)
		view["route"] = route
		view["measured_by_tick_started"] = lag.TickStart
		view["oldest_seconds"] = 0.0
		if !lag.OldestSince.IsZero() {
			view["oldest_seconds"] = max(now.Sub(lag.OldestSince).Seconds(), 0)
		}
		out = append(out, view)
	}
	return out
}

// routesJSON is the sweep's routes as /v1/status shows them, in snake_case like every other key.
func routesJSON(routes []sweeper.Route) []map[string]any {
	out := make([]map[string]any, 0, len(routes))
	for _, r := range routes {
		out = append(out, map[string]any{"name": r.Name, "mode": r.Mode, "level": r.Level, "source": r.Source, "target": r.Target})
	}
	return out
}

// orEmpty shows a nil list as [] rather than null.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
