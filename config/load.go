package config

import (
	redactpkg "github.com/stratalog/strata/internal/redact"

	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/sweeper"
)

// kind is a key's type.
type kind int

const (
	kindString kind = iota
	kindInt
	kindBool
	kindDuration
)

// name is the type's name in the reference.
func (k kind) name() string {
	return [...]string{"string", "integer", "boolean", "duration"}[k]
}

// specs is every key in table order; byKey indexes it by "section.name".
var (
	specs []*spec
	byKey = map[string]*spec{}
)

// init resolves each key of the table to its field in Config through the toml tags, and checks that
// the table and Config agree: every section and key has a field, every field a key.
func init() {
	ct := reflect.TypeFor[Config]()
	if ct.NumField() != len(sections) {
		panic(fmt.Sprintf("config: Config has %d sections, the key table %d", ct.NumField(), len(sections)))
	}
	for si := range sections {
		sec := &sections[si]
		if strings.Contains(sec.name, "_") {
			panic("config: section " + sec.name + " has an underscore, which STRATA_<SECTION>_<KEY> cannot split")
		}
		sf := fieldByTag(ct, sec.name)
		if sf.Type.Kind() != reflect.Struct || sf.Type.NumField() != len(sec.keys) {
			panic(fmt.Sprintf("config: Config.%s does not have the %d keys of [%s]", sf.Name, len(sec.keys), sec.name))
		}
		for ki := range sec.keys {
			s := &sec.keys[ki]
			kf := fieldByTag(sf.Type, s.name)
			s.key = sec.name + "." + s.name
			s.env = "STRATA_" + strings.ToUpper(sec.name) + "_" + strings.ToUpper(s.name)
			s.kind = kindOf(s.key, kf.Type)
			s.field = append([]int{sf.Index[0]}, kf.Index...)
			s.sec = sec
			if (s.kind == kindDuration || s.kind == kindInt) && s.rule.ok == nil {
				panic("config: " + s.key + " needs a range: every count and duration is bounded both ways")
			}
			if byKey[s.key] != nil {
				panic("config: " + s.key + " is in the key table twice")
			}
			byKey[s.key] = s
			specs = append(specs, s)
		}
	}
}

func fieldByTag(t reflect.Type, tag string) reflect.StructField {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("toml") == tag {
			return f
		}
	}
	panic(fmt.Sprintf("config: %s has no field tagged toml:%q", t, tag))
}

func kindOf(key string, t reflect.Type) kind {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return kindDuration
	case t.Kind() == reflect.String:
		return kindString
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return kindInt
	case t.Kind() == reflect.Bool:
		return kindBool
	}
	panic(fmt.Sprintf("config: %s has type %s, which the key table cannot carry", key, t))
}

func (s *spec) get(c *Config) any {
	v := reflect.ValueOf(c).Elem().FieldByIndex(s.field)
	switch s.kind {
	case kindInt:
		return int(v.Int())
	case kindBool:
		return v.Bool()
	case kindDuration:
		return time.Duration(v.Int())
	}
	return v.String()
}

func (s *spec) set(c *Config, x any) {
	v := reflect.ValueOf(c).Elem().FieldByIndex(s.field)
	switch s.kind {
	case kindInt:
		v.SetInt(int64(x.(int)))
	case kindBool:
		v.SetBool(x.(bool))
	case kindDuration:
		v.SetInt(int64(x.(time.Duration)))
	default:
		v.SetString(x.(string))
	}
}

func sectionNamed(name string) *section {
	for i := range sections {
		if sections[i].name == name {
			return &sections[i]
		}
	}
	return nil
}

func (sec *section) spec(name string) *spec {
	for i := range sec.keys {
		if sec.keys[i].name == name {
			return &sec.keys[i]
		}
	}
	return nil
}

func (sec *section) keyNames() string {
	names := make([]string, len(sec.keys))
	for i, s := range sec.keys {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

func sectionNames() string {
	names := make([]string, len(sections))
	for i, sec := range sections {
		names[i] = "[" + sec.name + "]"
	}
	return strings.Join(names, ", ")
}

// labels names where each key's value came from, for messages: the key (after the file's path, if
// any) or the environment variable. A key not in the map has its default and is named by its key.
type labels map[string]string

func (l labels) of(s *spec) string {
	if name, ok := l[s.key]; ok {
		return name
	}
	return s.key
}

// raiseDefaultGCGrace makes a blob.gc_grace left at its default twice sweep.max_agent_duration as it
// applies, when that is longer than the default: a default never conflicts with a key set elsewhere.
// A grace set explicitly is kept, and validate refuses it if it is not longer than the step's timeout.
func (c *Config) raiseDefaultGCGrace(from labels) {
	if _, set := from["blob.gc_grace"]; set {
		return
	}
	if agent := c.Sweep.MaxAgentDurationInEffect(); c.Blob.GCGrace <= agent {
		c.Blob.GCGrace = min(2*agent, gcGrace.Max)
	}
}

// parse applies the file (named path in messages, if not empty), then environ, then the overrides
// over the defaults, and validates the result.
func parse(data []byte, path string, environ []string, overrides ...Override) (Config, error) {
	c := Default()
	from := labels{}
	errs := applyTOML(&c, data, path, from)
	errs = append(errs, applyEnv(&c, environ, from)...)
	errs = append(errs, applyOverrides(&c, overrides, from)...)
	c.raiseDefaultGCGrace(from)
	// Validate even after errors, so one run reports every problem: a value that failed to convert
	// kept its default, which is valid.
	if err := c.validate(from); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// applyTOML sets the keys the file sets, and reports every name in the file the table does not spell
// exactly and every value of the wrong type.
//
// The file is decoded into a map, not into Config, and unknown names are found by walking
// MetaData.Keys rather than with MetaData.Undecoded: decoding into a struct matches names that differ
// only in case (PAGE_SIZE would set page_size, and with both present either could win), so Undecoded
// would miss them, and converting each value here lets the message name the key.
func applyTOML(c *Config, data []byte, path string, from labels) []error {
	prefix := ""
	if path != "" {
		prefix = path + ": "
	}
	var file map[string]any
	md, err := toml.Decode(string(data), &file)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return []error{fmt.Errorf("%sTOML syntax error on line %d, column %d: %s", prefix, pe.Position.Line, pe.Position.Col, pe.Message)}
		}
		return []error{fmt.Errorf("%s%w", prefix, err)}
	}
	// Walk the sections, then the section.keys, each once and in the file's order. md.Keys lists
	// dotted keys (sweep.page_size = 1) and implicit tables ([sweep.x]) only by their full names,
	// so both are taken from the prefixes of what it lists.
	var errs []error
	seenSection, seenKey := map[string]bool{}, map[string]bool{}
	for _, k := range md.Keys() {
		if seenSection[k[0]] {
			continue
		}
		seenSection[k[0]] = true
		sec := sectionNamed(k[0])
		_, isTable := file[k[0]].(map[string]any)
		switch {
		case sec == nil && isTable:
			errs = append(errs, fmt.Errorf("%s%s: unknown section: want one of %s", prefix, k[:1], sectionNames()))
		case sec == nil:
			errs = append(errs, fmt.Errorf("%s%s: unknown key outside any section: every key belongs to one of %s", prefix, k[:1], sectionNames()))
		case !isTable:
			errs = append(errs, fmt.Errorf("%s%s: %s is not a section: want a table [%s]", prefix, k[:1], showTOML(nil, file[k[0]]), sec.name))
		}
	}
	for _, k := range md.Keys() {
		if len(k) < 2 || seenKey[k[:2].String()] {
			continue
		}
		seenKey[k[:2].String()] = true
		sec := sectionNamed(k[0])
		table, isTable := file[k[0]].(map[string]any)
		if sec == nil || !isTable {
			continue // reported above
		}
		s := sec.spec(k[1])
		if s == nil {
			errs = append(errs, fmt.Errorf("%s%s: unknown key in [%s]: want one of %s", prefix, k[:2], sec.name, sec.keyNames()))
			continue
		}
		from[s.key] = prefix + s.key
		v, err := fromTOML(s, table[s.name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", prefix, s.key, err))
			continue
		}
		s.set(c, v)
	}
	return errs
}

// fromTOML converts a decoded TOML value to the key's type.
func fromTOML(s *spec, raw any) (any, error) {
	switch s.kind {
	case kindString:
		if v, ok := raw.(string); ok {
			return v, nil
		}
	case kindInt:
		if v, ok := raw.(int64); ok {
			if int64(int(v)) != v {
				return nil, fmt.Errorf("%d is out of range for an integer", v)
			}
			return int(v), nil
		}
	case kindBool:
		if v, ok := raw.(bool); ok {
			return v, nil
		}
	case kindDuration:
		if v, ok := raw.(string); ok {
			if d, err := time.ParseDuration(v); err == nil {
				return d, nil
			}
		}
	}
	return nil, notA(s, showTOML(s, raw))
}

// applyEnv sets the keys environ's STRATA_<SECTION>_<KEY> variables set. A variable whose section is
// not one of the table's is left alone (STRATA_TEST_POSTGRES_URL belongs to the tests); one under a
// known section with a key the section does not have is an error.
func applyEnv(c *Config, environ []string, from labels) []error {
	var errs []error
	for _, kv := range environ {
		name, raw, ok := strings.Cut(kv, "=")
		rest, strata := strings.CutPrefix(name, "STRATA_")
		if !ok || !strata {
			continue
		}
		secName, keyName, _ := strings.Cut(rest, "_")
		sec := sectionNamed(strings.ToLower(secName))
		if sec == nil {
			continue
		}
		s := sec.spec(strings.ToLower(keyName))
		if s == nil {
			errs = append(errs, fmt.Errorf("%s: [%s] has no key %q: want STRATA_%s_<KEY> with a key of %s",
				name, sec.name, strings.ToLower(keyName), strings.ToUpper(sec.name), sec.keyNames()))
			continue
		}
		label := fmt.Sprintf("%s (%s)", name, s.key)
		v, err := fromEnv(s, raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", label, err))
			continue
		}
		from[s.key] = label
		s.set(c, v)
	}
	return errs
}

// fromEnv converts a variable's text to the key's type.
func fromEnv(s *spec, raw string) (any, error) {
	var v any
	var err error
	switch s.kind {
	case kindString:
		return raw, nil
	case kindInt:
		v, err = strconv.Atoi(raw)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("%s is out of range for an integer", show(s, raw))
		}
	case kindBool:
		v, err = strconv.ParseBool(raw)
	case kindDuration:
		v, err = time.ParseDuration(raw)
	}
	if err != nil {
		return nil, notA(s, show(s, raw))
	}
	return v, nil
}

// notA is the error for a value of the wrong type, shown as shown.
func notA(s *spec, shown string) error {
	switch s.kind {
	case kindInt:
		return fmt.Errorf("%s is not an integer", shown)
	case kindBool:
		return fmt.Errorf("%s is not a boolean: want true or false", shown)
	case kindDuration:
		return fmt.Errorf(`%s is not a duration: want a Go duration string such as "30s", "5m" or "24h"`, shown)
	}
	return fmt.Errorf("%s is not a string: want a quoted string", shown)
}

// validate checks each key against its rule and the keys against each other, naming each key as from
// says its value came.
func (c Config) validate(from labels) error {
	var errs []error
	for _, s := range specs {
		if v := s.get(&c); s.rule.ok != nil && !s.rule.ok(v) {
			errs = append(errs, fmt.Errorf("%s: %s is not allowed: want %s", from.of(s), show(s, v), s.rule.want))
		}
	}
	if listen := byKey["http.listen"]; listenAddress.ok(c.HTTP.Listen) && !c.HTTP.Loopback() && c.HTTP.Token == "" {
		token := byKey["http.token"]
		errs = append(errs, fmt.Errorf("%s: %s is not a loopback address, so %s (%s) must be set: "+
			"the write endpoints require a bearer token off loopback", from.of(listen), show(listen, c.HTTP.Listen), token.key, token.env))
	}
	// Compared only when the three keys are each allowed: otherwise their own errors say enough.
	sweepOK := sweeper.MaxTickDurationRange.Contains(c.Sweep.MaxTickDuration) && sweeper.MaxAgentDurationRange.Contains(c.Sweep.MaxAgentDuration)
	if grace, agent := c.Blob.GCGrace, c.Sweep.MaxAgentDurationInEffect(); sweepOK && gcGrace.Contains(grace) && grace <= agent {
		g, a := byKey["blob.gc_grace"], byKey["sweep.max_agent_duration"]
		errs = append(errs, fmt.Errorf("%s: %s is not allowed: it must be longer than %s (%s), %s as it applies, "+
			"or the collector could remove the segment of an archive step still writing its index rows",
			from.of(g), show(g, grace), a.key, a.env, show(a, agent)))
	}
	if c.Blob.Retention > 0 && (c.Blob.Layout == archive.LayoutChunks || c.Blob.GCInterval == 0) {
		r := byKey["blob.retention"]
		errs = append(errs, fmt.Errorf("%s: %s needs blob.layout = %q and a blob.gc_interval above 0: "+
			"retention runs with the segment collector, over the packed layout's index", from.of(r), show(r, c.Blob.Retention), archive.LayoutPacked))
	}
	if len(errs) == 0 {
		// A backstop: the key table's rules are meant to be the sweeper's and the scheduler's, and tests
		// hold them equal.
		if err := c.SweeperConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
		if err := c.ScheduleConfig("config").Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// show renders a value for a message: strings and durations quoted, a secret hidden, a URL's password
// redacted.
func show(s *spec, v any) string {
	switch v := v.(type) {
	case string:
		if s != nil && s.secret {
			return "the value (hidden)"
		}
		return strconv.Quote(redact(v))
	case time.Duration:
		return strconv.Quote(formatDuration(v))
	}
	return fmt.Sprint(v)
}

// showTOML renders a decoded TOML value of the wrong type for a message.
func showTOML(s *spec, raw any) string {
	switch v := raw.(type) {
	case string:
		return show(s, v)
	case int64, float64, bool:
		return fmt.Sprint(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	case time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("a %T", raw)
}

// redact hides the secrets of a value that may be echoed in an error: a URL's user-info password,
// its secret query parameters, a keyword/value DSN's password.
func redact(s string) string { return redactpkg.URL(s) }
