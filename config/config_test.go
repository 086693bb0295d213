package config

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// samples holds a valid value other than the default for every key, for the round trips.
var samples = map[string]any{
	"storage.url":                         "postgres://strata@db.internal:5432/strata?schema=oplog",
	"blob.url":                            "fs:///var/lib/strata/blobs",
	"blob.layout":                         "chunks",
	"blob.gc_interval":                    time.Minute,
	"blob.gc_grace":                       2 * time.Hour,
	"blob.retention":                      90 * 24 * time.Hour,
	"scrub.interval":                      6 * time.Hour,
	"scrub.max_bytes":                     1 << 34,
	"scrub.max_duration":                  time.Hour,
	"schedule.url":                        "memory://",
	"schedule.archive_interval":           90 * time.Minute,
	"schedule.lease":                      45 * time.Second,
	"schedule.concurrency":                16,
	"schedule.max_attempts":               9,
	"schedule.poll_interval":              250 * time.Millisecond,
	"schedule.metrics_interval":           time.Minute,
	"stack.compressed_levels":             3,
	"sweep.enabled":                       false,
	"sweep.interval":                      15 * time.Second,
	"sweep.page_size":                     64,
	"sweep.max_concurrency":               2,
	"sweep.archive_batch":                 32,
	"sweep.max_archives_per_tick":         1000,
	"sweep.max_bytes_per_second":          1 << 20,
	"sweep.max_scanned_per_tick":          10_000,
	"sweep.max_tracked_agents":            5000,
	"sweep.max_tick_duration":             10 * time.Second,
	"sweep.max_backoff_intervals":         0,
	"sweep.max_agent_duration":            5 * time.Second,
	"sweep.shutdown_grace":                10 * time.Second,
	"sweep.durable_min_idle":              6 * time.Hour,
	"sweep.durable_max_archives_per_tick": 64,
	"sweep.durable_max_scanned_per_tick":  2048,
	"http.listen":                         "[::1]:9999",
	"http.token":                          "s3cret-Token_1",
	"http.max_body_bytes":                 4096,
	"http.body_timeout":                   30 * time.Second,
	"http.idle_timeout":                   5 * time.Minute,
	"residency.ttl":                       5 * time.Minute,
	"log.level":                           "debug",
	"log.format":                          "json",
}

// disallowed holds, for every key with a rule, values of the right type the rule rejects.
var disallowed = map[string][]any{
	"storage.url":                         {"mysql://db/strata", "", "memory://somewhere", "strata.db"},
	"blob.url":                            {"ftp://bucket/blobs", "sqlite:blobs.db", "memory://x", "webdav://host/dir"},
	"blob.layout":                         {"", "Packed", "segments"},
	"blob.gc_interval":                    {-time.Second, time.Nanosecond, 999 * time.Millisecond, 24*time.Hour + 1},
	"blob.gc_grace":                       {time.Duration(0), -time.Hour, 999 * time.Millisecond, 30*24*time.Hour + 1},
	"blob.retention":                      {-time.Hour, 59 * time.Second, 100*365*24*time.Hour + 1},
	"scrub.interval":                      {-time.Minute, 59 * time.Second, 30*24*time.Hour + 1},
	"scrub.max_bytes":                     {0, 1<<20 - 1, 1<<50 + 1},
	"scrub.max_duration":                  {time.Duration(0), 999 * time.Millisecond, 24*time.Hour + 1},
	"schedule.url":                        {"redis://127.0.0.1:6379/0", "multisqlite:dir", "fs:dir"},
	"schedule.archive_interval":           {-time.Second, 367 * 24 * time.Hour},
	"schedule.lease":                      {time.Duration(0), -time.Second, 2 * time.Nanosecond, 999 * time.Millisecond, 25 * time.Hour},
	"schedule.concurrency":                {0, -1, 1025, math.MaxInt},
	"schedule.max_attempts":               {0, 1001},
	"schedule.poll_interval":              {time.Duration(0), -time.Millisecond, 9 * time.Millisecond, 61 * time.Minute},
	"schedule.metrics_interval":           {time.Duration(0), -time.Second, 999 * time.Millisecond, time.Hour + 1},
	"stack.compressed_levels":             {0, 9, -1},
	"sweep.interval":                      {-time.Millisecond, 25 * time.Hour},
	"sweep.page_size":                     {0, -3, 10_001},
	"sweep.max_concurrency":               {0, 1025},
	"sweep.archive_batch":                 {-1, 4097},
	"sweep.max_archives_per_tick":         {0, 1_000_001},
	"sweep.max_bytes_per_second":          {-1, 1023, 1<<40 + 1},
	"sweep.max_scanned_per_tick":          {0, math.MaxInt},
	"sweep.max_tracked_agents":            {0, 100_000_001},
	"sweep.max_tick_duration":             {-time.Second, 25 * time.Hour},
	"sweep.max_backoff_intervals":         {-1, 1025},
	"sweep.max_agent_duration":            {-time.Second, 25 * time.Hour},
	"sweep.shutdown_grace":                {-time.Second, 61 * time.Minute},
	"sweep.durable_min_idle":              {-time.Second, 367 * 24 * time.Hour},
	"sweep.durable_max_archives_per_tick": {-1, 1_000_001},
	"sweep.durable_max_scanned_per_tick":  {-1, math.MaxInt},
	"http.listen":                         {"9464", "localhost", "127.0.0.1:99999", "127.0.0.1:http", ""},
	"http.token":                          {"two words", "tab\there", "ünïcode"},
	"http.max_body_bytes":                 {0, -1, 255, 1<<30 + 1},
	"http.body_timeout":                   {time.Duration(0), -time.Second, 999 * time.Millisecond, 10*time.Minute + 1},
	"http.idle_timeout":                   {time.Duration(0), -time.Second, 999 * time.Millisecond, time.Hour + 1},
	"residency.ttl":                       {time.Duration(0), -2 * time.Minute, 999 * time.Millisecond, 25 * time.Hour},
	"log.level":                           {"verbose", "INFO", ""},
	"log.format":                          {"yaml", "JSON"},
}

// wrongType holds, per type, values of another type: as a TOML literal with how the message shows
// it, and as environment text where the environment can say it (the message quotes it).
var wrongType = map[kind][]struct{ toml, env, shown string }{
	kindString:   {{toml: "5", shown: "5"}, {toml: "true", shown: "true"}, {toml: "[1]", shown: "an array"}},
	kindInt:      {{`"abc"`, "abc", `"abc"`}, {"1.5", "1.5", "1.5"}, {"true", "", "true"}, {"{ a = 1 }", "", "a table"}},
	kindBool:     {{`"yes"`, "yes", `"yes"`}, {"1", "2", "1"}, {"0", "", "0"}},
	kindDuration: {{"60", "", "60"}, {`"abc"`, "abc", `"abc"`}, {`"5"`, "5", `"5"`}, {`"1 day"`, "1 day", `"1 day"`}},
}

// envText writes a value the way an environment variable carries it.
func envText(v any) string {
	if d, ok := v.(time.Duration); ok {
		return formatDuration(d)
	}
	return fmt.Sprint(v)
}

// fileWith is a file setting one key.
func fileWith(s *spec, literal string) []byte {
	return fmt.Appendf(nil, "[%s]\n%s = %s\n", s.sec.name, s.name, literal)
}

func envLabel(s *spec) string { return fmt.Sprintf("%s (%s)", s.env, s.key) }

// requireOneError checks err is exactly one message, want.
func requireOneError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	if err.Error() != want {
		t.Fatalf("error\n  %s\nwant\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "), want)
	}
}

func TestDefault_Validates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoad_NoFileNoEnvironmentIsDefault(t *testing.T) {
	for name, load := range map[string]func() (Config, error){
		"Load":        func() (Config, error) { return Load("", nil) },
		"Parse nil":   func() (Config, error) { return Parse(nil, nil) },
		"Parse empty": func() (Config, error) { return Parse([]byte("# nothing\n\n[sweep]\n"), []string{"PATH=/bin"}) },
	} {
		c, err := load()
		if err != nil || c != Default() {
			t.Errorf("%s: %+v, %v; want the defaults", name, c, err)
		}
	}
}

func TestDefault_SweepIsTheSweepersDefault(t *testing.T) {
	if got, want := Default().SweeperConfig(), sweeper.DefaultConfig(); got != want {
		t.Fatalf("SweeperConfig of the defaults = %+v; sweeper.DefaultConfig = %+v", got, want)
	}
}

func TestDefaultsTOML_ParsesBackToDefault(t *testing.T) {
	c, err := Parse([]byte(DefaultsTOML()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Fatalf("DefaultsTOML parses to %+v; want %+v", c, Default())
	}
}

func TestDefaultsTOML_SetsEveryKeyUnderItsComment(t *testing.T) {
	text := DefaultsTOML()
	var m map[string]any
	md, err := toml.Decode(text, &m)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if !md.IsDefined(s.sec.name, s.name) {
			t.Errorf("%s is missing from DefaultsTOML", s.key)
		}
		// The comment right above the key ends with its environment variable.
		if !strings.Contains(text, "Env: "+s.env+".\n"+s.name+" = ") && !strings.Contains(text, "Env:\n# "+s.env+".\n"+s.name+" = ") {
			t.Errorf("%s is not right under a comment naming %s", s.key, s.env)
		}
	}
	if n := len(md.Keys()); n != len(specs)+len(sections) {
		t.Errorf("DefaultsTOML has %d keys and sections; the table has %d", n, len(specs)+len(sections))
	}
}

func TestKeys_SweepBudgetsAreMarkedUntuned(t *testing.T) {
	for _, s := range sections[slices.IndexFunc(sections, func(sec section) bool { return sec.name == "sweep" })].keys {
		if s.name != "enabled" && !s.untuned {
			t.Errorf("sweep.%s is a budget and is not marked untuned", s.name)
		}
	}
}

func TestKeys_EveryKeyHasASampleAndEveryRuleACase(t *testing.T) {
	d := Default()
	for _, s := range specs {
		v, ok := samples[s.key]
		if !ok {
			t.Errorf("%s has no sample value", s.key)
			continue
		}
		if v == s.get(&d) {
			t.Errorf("%s: the sample %v is the default", s.key, v)
		}
		if s.rule.ok != nil && len(disallowed[s.key]) == 0 {
			t.Errorf("%s has a rule but no disallowed value", s.key)
		}
	}
	if len(samples) != len(specs) {
		t.Errorf("%d samples for %d keys", len(samples), len(specs))
	}
}

func TestKeys_RoundTripThroughTheFile(t *testing.T) {
	for _, s := range specs {
		v := samples[s.key]
		want := Default()
		s.set(&want, v)
		got, err := Parse(fileWith(s, tomlValue(v)), nil)
		if err != nil {
			t.Errorf("%s = %s: %v", s.key, tomlValue(v), err)
		} else if got != want {
			t.Errorf("%s = %s parsed to %+v; want %+v", s.key, tomlValue(v), got, want)
		}
	}
}

func TestKeys_RoundTripThroughTheEnvironment(t *testing.T) {
	for _, s := range specs {
		v := samples[s.key]
		want := Default()
		s.set(&want, v)
		got, err := Parse(nil, []string{s.env + "=" + envText(v)})
		if err != nil {
			t.Errorf("%s=%s: %v", s.env, envText(v), err)
		} else if got != want {
			t.Errorf("%s=%s parsed to %+v; want %+v", s.env, envText(v), got, want)
		}
	}
}

func TestKeys_WrongTypeIsRejectedNamingTheKey(t *testing.T) {
	for _, s := range specs {
		for _, c := range wrongType[s.kind] {
			want := notA(s, c.shown).Error()
			_, err := Parse(fileWith(s, c.toml), nil)
			requireOneError(t, err, s.key+": "+want)
			if c.env != "" {
				_, err = Parse(nil, []string{s.env + "=" + c.env})
				requireOneError(t, err, envLabel(s)+": "+notA(s, strconv.Quote(c.env)).Error())
			}
		}
	}
}

func TestKeys_DisallowedValueIsRejectedNamingTheKeyTheValueAndWhatIsAllowed(t *testing.T) {
	for _, s := range specs {
		for _, v := range disallowed[s.key] {
			if s.rule.ok(v) {
				t.Fatalf("%s: %#v is in the disallowed table but the rule allows it", s.key, v)
			}
			detail := fmt.Sprintf("%s is not allowed: want %s", show(s, v), s.rule.want)
			_, err := Parse(fileWith(s, tomlValue(v)), nil)
			requireOneError(t, err, s.key+": "+detail)
			_, err = Parse(nil, []string{s.env + "=" + envText(v)})
			requireOneError(t, err, envLabel(s)+": "+detail)
			c := Default()
			s.set(&c, v)
			requireOneError(t, c.Validate(), s.key+": "+detail)
		}
	}
}

func TestValidate_TheExampleMessages(t *testing.T) {
	_, err := Parse([]byte("[sweep]\npage_size = -3\n"), nil)
	requireOneError(t, err, "sweep.page_size: -3 is not allowed: want an integer from 1 to 10000")
	_, err = Parse([]byte("[schedule]\nlease = \"2ns\"\n"), nil)
	requireOneError(t, err, `schedule.lease: "2ns" is not allowed: want a duration from 1s to 24h`)
	_, err = Parse([]byte("[sweep]\nmax_scanned_per_tick = 9223372036854775807\n"), nil)
	requireOneError(t, err, "sweep.max_scanned_per_tick: 9223372036854775807 is not allowed: want an integer from 1 to 100000000")
	_, err = Parse(nil, []string{"STRATA_SCHEDULE_ARCHIVE_INTERVAL=9000h"})
	requireOneError(t, err, `STRATA_SCHEDULE_ARCHIVE_INTERVAL (schedule.archive_interval): "9000h" is not allowed: `+
		"want a duration from 0 to 8784h (366 days)")
	_, err = Parse(nil, []string{"STRATA_SWEEP_PAGE_SIZE=abc"})
	requireOneError(t, err, `STRATA_SWEEP_PAGE_SIZE (sweep.page_size): "abc" is not an integer`)
}

func TestValidate_ReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("[sweep]\npage_size = 0\ninterval = 5\n[log]\nlevel = \"loud\"\n"), []string{"STRATA_STACK_COMPRESSED_LEVELS=x"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"sweep.page_size: 0", "sweep.interval: 5", `log.level: "loud"`, "STRATA_STACK_COMPRESSED_LEVELS (stack.compressed_levels)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// Every count and duration has a range with both bounds: no value validates and then overflows, or
// divides or ticks to nothing.
func TestKeys_EveryCountAndDurationIsBoundedBothWays(t *testing.T) {
	for _, s := range specs {
		var extremes []any
		switch s.kind {
		case kindInt:
			extremes = []any{math.MinInt, -1, math.MaxInt}
		case kindDuration:
			extremes = []any{time.Duration(math.MinInt64), -time.Nanosecond, time.Duration(math.MaxInt64)}
		default:
			continue
		}
		if s.rule.ok == nil {
			t.Errorf("%s has no range", s.key)
			continue
		}
		for _, v := range extremes {
			if s.rule.ok(v) {
				t.Errorf("%s allows %v", s.key, v)
			}
		}
	}
}

// probes are the values at and beside the bounds of the given ranges, and beyond them all.
func probes[T int | time.Duration](step T, ranges ...struct{ Min, Max T }) []T {
	out := []T{-step, 0, step, 2 * step, math.MaxInt64}
	for _, r := range ranges {
		out = append(out, r.Min-step, r.Min, r.Max, r.Max+step)
	}
	return out
}

// The key table's rules for [sweep] are sweeper.Config.Validate's: at the bounds of every sweep range
// they must agree.
func TestValidate_SweepRulesAgreeWithTheSweeper(t *testing.T) {
	ints := probes(1, struct{ Min, Max int }(sweeper.PageSizeRange), struct{ Min, Max int }(sweeper.MaxConcurrencyRange),
		struct{ Min, Max int }(sweeper.MaxArchivesPerTickRange), struct{ Min, Max int }(sweeper.MaxScannedPerTickRange),
		struct{ Min, Max int }(sweeper.MaxTrackedAgentsRange), struct{ Min, Max int }(sweeper.MaxBackoffIntervalsRange))
	durations := probes(time.Nanosecond, struct{ Min, Max time.Duration }(sweeper.IntervalRange),
		struct{ Min, Max time.Duration }(sweeper.MaxTickDurationRange), struct{ Min, Max time.Duration }(sweeper.MaxAgentDurationRange),
		struct{ Min, Max time.Duration }(sweeper.ShutdownGraceRange))
	for _, s := range specs {
		if s.sec.name != "sweep" || s.rule.ok == nil {
			continue
		}
		var values []any
		switch s.kind {
		case kindInt:
			for _, v := range ints {
				values = append(values, v)
			}
		case kindDuration:
			for _, v := range durations {
				values = append(values, v)
			}
		}
		for _, v := range values {
			// Not compared: 0, which sweeper.Config reads as the default and the file never passes on
			// as 0 (SweeperConfig), and a negative grace, which sweeper.Config reads as none.
			if d, ok := v.(time.Duration); v == 0 || d == 0 && ok || s.name == "shutdown_grace" && d < 0 {
				continue
			}
			c := Default()
			s.set(&c, v)
			if ours, theirs := s.rule.ok(v), c.SweeperConfig().Validate() == nil; ours != theirs {
				t.Errorf("%s = %v: the key table allows it: %v; sweeper.Config.Validate allows it: %v", s.key, v, ours, theirs)
			}
		}
	}
}

// The key table's rules for [schedule] are the scheduler's: schedule.Config.Validate's (where 0, which
// the file never means, is the scheduler's default) and, for archive_interval, the registrar's range.
func TestValidate_ScheduleRulesAgreeWithTheScheduler(t *testing.T) {
	ints := probes(1, struct{ Min, Max int }(schedule.ConcurrencyRange), struct{ Min, Max int }(schedule.MaxAttemptsRange))
	durations := probes(time.Nanosecond, struct{ Min, Max time.Duration }(schedule.LeaseRange),
		struct{ Min, Max time.Duration }(schedule.PollIntervalRange), struct{ Min, Max time.Duration }(schedule.ArchiveIntervalRange))
	for _, s := range specs {
		if s.sec.name != "schedule" || s.rule.ok == nil || (s.kind != kindInt && s.kind != kindDuration) {
			continue
		}
		var values []any
		for _, v := range ints {
			if s.kind == kindInt {
				values = append(values, v)
			}
		}
		for _, v := range durations {
			if s.kind == kindDuration {
				values = append(values, v)
			}
		}
		for _, v := range values {
			c := Default()
			s.set(&c, v)
			var theirs bool
			switch {
			case s.name == "archive_interval":
				theirs = schedule.ArchiveIntervalRange.Contains(v.(time.Duration))
			case v == 0 || v == time.Duration(0):
				continue
			default:
				theirs = c.ScheduleConfig("me").Validate() == nil
			}
			if ours := s.rule.ok(v); ours != theirs {
				t.Errorf("%s = %v: the key table allows it: %v; the scheduler allows it: %v", s.key, v, ours, theirs)
			}
		}
	}
}

// sweep.shutdown_grace is the scheduler's grace too, so both must take the same values.
func TestValidate_OneShutdownGraceForTheProcess(t *testing.T) {
	if sweeper.ShutdownGraceRange.Min != schedule.ShutdownGraceRange.Min || sweeper.ShutdownGraceRange.Max != schedule.ShutdownGraceRange.Max {
		t.Fatalf("sweeper.ShutdownGraceRange %v, schedule.ShutdownGraceRange %v", sweeper.ShutdownGraceRange, schedule.ShutdownGraceRange)
	}
	for _, grace := range []time.Duration{0, time.Nanosecond, time.Hour} {
		c := Default()
		c.Sweep.ShutdownGrace = grace
		if err := c.Validate(); err != nil {
			t.Errorf("shutdown_grace %v: %v", grace, err)
		}
	}
}

func TestFile_UnknownKeysAreRejectedByName(t *testing.T) {
	file := `
top = 1
[executor]
shard_count = 3
[sweep]
page_size = 64
pagesize = 64
PAGE_SIZE = 64
[sweep.nested]
x = 1
[SWEEP]
interval = "1s"
`
	_, err := Parse([]byte(file), nil)
	if err == nil {
		t.Fatal("no error")
	}
	sections := "[storage], [blob], [scrub], [schedule], [stack], [sweep], [http], [residency], [log]"
	keys := "enabled, interval, page_size, max_concurrency, archive_batch, max_archives_per_tick, max_bytes_per_second, max_scanned_per_tick, " +
		"max_tracked_agents, max_tick_duration, max_backoff_intervals, max_agent_duration, shutdown_grace, " +
		"durable_min_idle, durable_max_archives_per_tick, durable_max_scanned_per_tick"
	want := []string{
		"top: unknown key outside any section: every key belongs to one of " + sections,
		"executor: unknown section: want one of " + sections,
		"sweep.pagesize: unknown key in [sweep]: want one of " + keys,
		"sweep.PAGE_SIZE: unknown key in [sweep]: want one of " + keys,
		"sweep.nested: unknown key in [sweep]: want one of " + keys,
		"SWEEP: unknown section: want one of " + sections,
	}
	got := strings.Split(err.Error(), "\n")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("errors\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestFile_ASectionThatIsNotATableIsRejected(t *testing.T) {
	_, err := Parse([]byte("sweep = 3\n"), nil)
	requireOneError(t, err, "sweep: 3 is not a section: want a table [sweep]")
	_, err = Parse([]byte("[[sweep]]\npage_size = 3\n[[sweep]]\npage_size = 4\n"), nil)
	requireOneError(t, err, "sweep: an array is not a section: want a table [sweep]")
}

func TestFile_InlineTablesAndDottedKeysSetKeys(t *testing.T) {
	c, err := Parse([]byte("sweep = { page_size = 3 }\nlog.level = \"debug\"\n[http]\nmax_body_bytes = 1000\n"), nil)
	if err != nil || c.Sweep.PageSize != 3 || c.Log.Level != "debug" || c.HTTP.MaxBodyBytes != 1000 {
		t.Fatalf("page_size %d, log.level %q, max_body_bytes %d, %v; want 3, debug, 1000", c.Sweep.PageSize, c.Log.Level, c.HTTP.MaxBodyBytes, err)
	}
}

func TestFile_ImplicitTablesUnderASectionAreRejected(t *testing.T) {
	_, err := Parse([]byte("[sweep]\nnested.x = 1\n"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "sweep.nested: unknown key in [sweep]") {
		t.Errorf("sweep.nested.x: %v; want sweep.nested rejected", err)
	}
	_, err = Parse([]byte("[executor.x]\ny = 1\n"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "executor: unknown section") {
		t.Errorf("[executor.x]: %v; want executor rejected", err)
	}
}

func TestFile_SyntaxErrorNamesTheLine(t *testing.T) {
	_, err := Parse([]byte("[sweep]\npage_size = 64\ninterval = = \"1s\"\n"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "TOML syntax error on line 3, column ") {
		t.Fatalf("error %v; want a syntax error on line 3", err)
	}
}

func TestEnv_OverridesTheFile(t *testing.T) {
	c, err := Parse([]byte("[sweep]\npage_size = 32\nmax_concurrency = 2\n"), []string{"STRATA_SWEEP_PAGE_SIZE=64"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Sweep.PageSize != 64 || c.Sweep.MaxConcurrency != 2 {
		t.Fatalf("page_size %d, max_concurrency %d; want 64 from the environment and 2 from the file", c.Sweep.PageSize, c.Sweep.MaxConcurrency)
	}
}

func TestEnv_UnknownKeyUnderAKnownSectionIsRejected(t *testing.T) {
	for variable, want := range map[string]string{
		"STRATA_SWEEP_PAGESIZE=64": `STRATA_SWEEP_PAGESIZE: [sweep] has no key "pagesize": want STRATA_SWEEP_<KEY> with a key of ` +
			"enabled, interval, page_size, max_concurrency, archive_batch, max_archives_per_tick, max_bytes_per_second, max_scanned_per_tick, max_tracked_agents, " +
			"max_tick_duration, max_backoff_intervals, max_agent_duration, shutdown_grace, durable_min_idle, " +
			"durable_max_archives_per_tick, durable_max_scanned_per_tick",
		"STRATA_LOG_COLOR=1":  `STRATA_LOG_COLOR: [log] has no key "color": want STRATA_LOG_<KEY> with a key of level, format`,
		"STRATA_HTTP=x":       `STRATA_HTTP: [http] has no key "": want STRATA_HTTP_<KEY> with a key of listen, token, max_body_bytes, body_timeout, idle_timeout`,
		"STRATA_RESIDENCY_=x": `STRATA_RESIDENCY_: [residency] has no key "": want STRATA_RESIDENCY_<KEY> with a key of ttl`,
	} {
		_, err := Parse(nil, []string{variable})
		requireOneError(t, err, want)
	}
}

func TestEnv_OtherVariablesAreIgnored(t *testing.T) {
	c, err := Parse(nil, []string{
		"STRATA_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"STRATA_TEST_REDIS_URL=redis://127.0.0.1:6379/0",
		"STRATA_SWEEPER_PAGE_SIZE=abc",
		"STRATA=1",
		"STRATA_=1",
		"XSTRATA_SWEEP_PAGE_SIZE=abc",
		"PATH=/usr/bin",
		"NOEQUALS",
	})
	if err != nil || c != Default() {
		t.Fatalf("%+v, %v; want the defaults", c, err)
	}
}

func TestEnv_AnEmptyValueSetsAnEmptyString(t *testing.T) {
	c, err := Parse([]byte("[http]\ntoken = \"abc\"\n"), []string{"STRATA_HTTP_TOKEN="})
	if err != nil || c.HTTP.Token != "" {
		t.Fatalf("token %q, %v; want it cleared", c.HTTP.Token, err)
	}
}

func TestHTTP_NonLoopbackListenWithoutTokenIsRejected(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:9464", ":9464", "[::]:9464", "10.0.0.7:9464", "strata.internal:9464"} {
		_, err := Parse(fmt.Appendf(nil, "[http]\nlisten = %q\n", listen), nil)
		requireOneError(t, err, fmt.Sprintf("http.listen: %q is not a loopback address, so http.token (STRATA_HTTP_TOKEN) must be set: "+
			"the write endpoints require a bearer token off loopback", listen))

		_, err = Parse(nil, []string{"STRATA_HTTP_LISTEN=" + listen})
		requireOneError(t, err, fmt.Sprintf("STRATA_HTTP_LISTEN (http.listen): %q is not a loopback address, so http.token "+
			"(STRATA_HTTP_TOKEN) must be set: the write endpoints require a bearer token off loopback", listen))

		c, err := Parse(fmt.Appendf(nil, "[http]\nlisten = %q\n", listen), []string{"STRATA_HTTP_TOKEN=t0ken"})
		if err != nil || c.HTTP.Listen != listen || c.HTTP.Token != "t0ken" {
			t.Errorf("listen %s with a token: %+v, %v; want it accepted", listen, c.HTTP, err)
		}
	}
}

func TestHTTP_LoopbackListenNeedsNoToken(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:9464", "127.0.0.2:0", "localhost:9464", "[::1]:9464"} {
		c, err := Parse(nil, []string{"STRATA_HTTP_LISTEN=" + listen})
		if err != nil || !c.HTTP.Loopback() {
			t.Errorf("listen %s: loopback %v, %v; want it accepted as loopback", listen, c.HTTP.Loopback(), err)
		}
	}
}

func TestErrors_NeverEchoASecret(t *testing.T) {
	_, err := Parse([]byte("[http]\ntoken = \"hunter2 hunter2\"\n"), []string{"STRATA_STORAGE_URL=mysql://admin:pa55word@db/strata"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, secret := range []string{"hunter2", "pa55word"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q echoes %q", err, secret)
		}
	}
	if !strings.Contains(err.Error(), "http.token: the value (hidden) is not allowed") || !strings.Contains(err.Error(), "mysql://admin:xxxxx@db/strata") {
		t.Errorf("error %q does not name the token and the redacted URL", err)
	}
	// A URL that does not parse keeps its scheme and nothing before its last @.
	_, err = Parse(nil, []string{"STRATA_STORAGE_URL=mysql://admin:pa55word@db:port/strata"})
	if err == nil || strings.Contains(err.Error(), "pa55word") || !strings.Contains(err.Error(), `"mysql://xxxxx@db:port/strata"`) {
		t.Errorf("unparseable URL: %v; want it shown redacted", err)
	}
}

func TestLoad_ReadsTheFileAndNamesItInErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte("[sweep]\npage_size = 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("[sweep]\npage_size = -3\nextra = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(good, []string{"STRATA_SWEEP_MAX_CONCURRENCY=2"})
	if err != nil || c.Sweep.PageSize != 64 || c.Sweep.MaxConcurrency != 2 {
		t.Fatalf("%+v, %v; want page_size 64 from the file and max_concurrency 2 from the environment", c.Sweep, err)
	}
	_, err = Load(bad, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{bad + ": sweep.page_size: -3 is not allowed", bad + ": sweep.extra: unknown key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.toml"), nil); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: %v; want an error naming it", err)
	}
}

func TestScheduleConfig_CarriesTheSection(t *testing.T) {
	c := Default()
	c.Schedule.Lease = time.Minute
	c.Schedule.PollInterval = 2 * time.Second
	c.Schedule.Concurrency = 7
	c.Schedule.MaxAttempts = 3
	c.Sweep.ShutdownGrace = 5 * time.Second
	got := c.ScheduleConfig("sidecar-1")
	want := schedule.Config{Owner: "sidecar-1", PollInterval: 2 * time.Second, Lease: time.Minute, Concurrency: 7, MaxAttempts: 3,
		ShutdownGrace: 5 * time.Second}
	if got.Owner != want.Owner || got.PollInterval != want.PollInterval || got.Lease != want.Lease || got.Concurrency != want.Concurrency ||
		got.MaxAttempts != want.MaxAttempts || got.ShutdownGrace != want.ShutdownGrace || got.BackoffBase != 0 || got.BackoffMax != 0 || got.Now != nil {
		t.Fatalf("ScheduleConfig = %+v; want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	// sweep.shutdown_grace = 0 cancels at once; a zero schedule.Config.ShutdownGrace would be its default.
	c.Sweep.ShutdownGrace = 0
	if g := c.ScheduleConfig("sidecar-1").ShutdownGrace; g >= 0 {
		t.Fatalf("shutdown_grace 0 reaches the scheduler as %v; want a negative grace (cut at once)", g)
	}
	// And the sweeper: a key's 0 keeps the key table's meaning, where sweeper.Config's 0 is the default.
	c.Sweep.Interval, c.Sweep.MaxTickDuration, c.Sweep.MaxBackoffIntervals = 0, 0, 0
	sw := c.SweeperConfig()
	if sw.ShutdownGrace >= 0 || sw.Interval != sweeper.MinInterval || sw.MaxTickDuration != sweeper.MinTickDuration || sw.MaxBackoffIntervals != 1 {
		t.Fatalf("the keys' 0 reach the sweeper as %+v; want no grace, the clamps and no backoff", sw)
	}
}

func TestSweeperConfig_CarriesTheSection(t *testing.T) {
	c := Default()
	for _, s := range specs {
		if s.sec.name == "sweep" {
			s.set(&c, samples[s.key])
		}
	}
	want := sweeper.Config{Enabled: false, Interval: 15 * time.Second, PageSize: 64, MaxConcurrency: 2, ArchiveBatch: 32, MaxArchivesPerTick: 1000, MaxBytesPerSecond: 1 << 20,
		MaxScannedPerTick: 10_000, MaxTrackedAgents: 5000, MaxTickDuration: 10 * time.Second, MaxBackoffIntervals: 1,
		MaxAgentDuration: 5 * time.Second, ShutdownGrace: 10 * time.Second,
		DurableMinIdle: 6 * time.Hour, DurableMaxArchivesPerTick: 64, DurableMaxScannedPerTick: 2048}
	if got := c.SweeperConfig(); got != want {
		t.Fatalf("SweeperConfig = %+v; want %+v", got, want)
	}
}

func TestLog_SlogLevel(t *testing.T) {
	for level, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if got := (Log{Level: level}).SlogLevel(); got != want {
			t.Errorf("%s: %v; want %v", level, got, want)
		}
	}
}

// The URL rules check the schemes the openers in package backends understand.
func TestURLRules_SchemesAreTheBackendsSchemes(t *testing.T) {
	for name, pair := range map[string][2][]string{
		"storage":  {storageSchemes, backends.Schemes},
		"blob":     {blobSchemes, backends.BlobSchemes},
		"schedule": {scheduleSchemes, backends.ScheduleSchemes},
	} {
		ours, theirs := slices.Sorted(slices.Values(pair[0])), slices.Sorted(slices.Values(pair[1]))
		if !slices.Equal(ours, theirs) {
			t.Errorf("%s: the config checks schemes %v; backends opens %v", name, ours, theirs)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9464": true, "127.9.9.9:1": true, "localhost:0": true, "[::1]:9464": true,
		"0.0.0.0:9464": false, ":9464": false, "[::]:9464": false, "192.168.1.2:80": false,
		"strata.internal:9464": false, "127.0.0.1": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v; want %v", addr, got, want)
		}
	}
}

func TestEffectiveTOMLRedactsSecretsAndParsesBack(t *testing.T) {
	cfg, err := Parse([]byte(`[storage]
url = "postgres://u:hunter2@127.0.0.1/db?password=hunter2&sslmode=disable"
[http]
token = "hunter2-token"
[sweep]
page_size = 77
`), []string{"STRATA_SWEEP_MAX_CONCURRENCY=3"})
	if err != nil {
		t.Fatal(err)
	}
	out := cfg.EffectiveTOML()
	if strings.Contains(out, "hunter2") {
		t.Fatalf("secrets shown:\n%s", out)
	}
	back, err := Parse([]byte(strings.Replace(out, `"(hidden)"`, `"x"`, 1)), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if back.Sweep.PageSize != 77 || back.HTTP.Token != "x" || back.Sweep != cfg.Sweep {
		t.Fatalf("parsed back: %+v", back.Sweep)
	}
}

// blob.gc_grace must outlast an archive step: sweep.max_agent_duration as it applies (0 reading as
// max_tick_duration), or the collector could remove a segment whose rows are still being written.
func TestValidate_GCGraceMustExceedTheMaxAgentDurationInEffect(t *testing.T) {
	for _, tc := range []struct {
		agent, tick, grace time.Duration
		ok                 bool
	}{
		{agent: 0, tick: 30 * time.Second, grace: time.Hour, ok: true},
		{agent: 10 * time.Minute, tick: time.Minute, grace: 10*time.Minute + 1, ok: true},
		{agent: 10 * time.Minute, tick: time.Minute, grace: 10 * time.Minute},
		{agent: 0, tick: 2 * time.Hour, grace: time.Hour},            // 0 reads as max_tick_duration
		{agent: 0, tick: 0, grace: time.Second},                      // both read as the 1s clamp
		{agent: 0, tick: 0, grace: 2 * time.Second, ok: true},        // past the clamp
		{agent: 500 * time.Millisecond, tick: 0, grace: time.Second}, // below the clamp reads as 1s
	} {
		c := Default()
		c.Sweep.MaxAgentDuration, c.Sweep.MaxTickDuration, c.Blob.GCGrace = tc.agent, tc.tick, tc.grace
		err := c.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("max_agent_duration %v, max_tick_duration %v, gc_grace %v: %v, want ok %v", tc.agent, tc.tick, tc.grace, err, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "blob.gc_grace: ") {
			t.Errorf("the error does not name blob.gc_grace first: %v", err)
		}
	}
	c := Default()
	c.Sweep.MaxAgentDuration, c.Blob.GCGrace = 2*time.Hour, time.Hour
	requireOneError(t, c.Validate(), `blob.gc_grace: "1h" is not allowed: it must be longer than sweep.max_agent_duration `+
		`(STRATA_SWEEP_MAX_AGENT_DURATION), "2h" as it applies, or the collector could remove the segment of an archive step still writing its index rows`)
}

// A blob.gc_grace left at its default follows a longer sweep.max_agent_duration (twice it), so a
// configuration that only raises the step's timeout loads; one set explicitly is held to the rule.
func TestParse_ADefaultGCGraceFollowsALongerMaxAgentDuration(t *testing.T) {
	c, err := Parse([]byte("[sweep]\nmax_agent_duration = \"1h\"\n"), nil)
	if err != nil {
		t.Fatalf("max_agent_duration 1h with the default gc_grace: %v", err)
	}
	if c.Blob.GCGrace != 2*time.Hour {
		t.Fatalf("gc_grace %v, want twice max_agent_duration (2h)", c.Blob.GCGrace)
	}
	if c, err := Parse(nil, []string{"STRATA_SWEEP_MAX_AGENT_DURATION=10m"}); err != nil || c.Blob.GCGrace != time.Hour {
		t.Fatalf("a shorter max_agent_duration keeps the default: %v %v", c.Blob.GCGrace, err)
	}
	_, err = Parse([]byte("[sweep]\nmax_agent_duration = \"1h\"\n[blob]\ngc_grace = \"1h\"\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "gc_grace") {
		t.Fatalf("an explicit gc_grace of max_agent_duration: %v, want refused", err)
	}
}

// blob.retention runs with the collector over the packed index: with the chunk layout, or with the
// collector off, it could never run, so the configuration is refused rather than silently keeping
// everything.
func TestValidate_RetentionNeedsThePackedLayoutAndTheCollector(t *testing.T) {
	c := Default()
	c.Blob.Retention = 30 * 24 * time.Hour
	if err := c.Validate(); err != nil {
		t.Fatalf("retention with the defaults: %v", err)
	}
	c.Blob.Layout = "chunks"
	requireOneError(t, c.Validate(), `blob.retention: "720h" needs blob.layout = "packed" and a blob.gc_interval above 0: `+
		`retention runs with the segment collector, over the packed layout's index`)
	c = Default()
	c.Blob.Retention, c.Blob.GCInterval = time.Hour, 0
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "blob.retention: ") {
		t.Fatalf("retention with the collector off: %v, want refused naming blob.retention", err)
	}
}
