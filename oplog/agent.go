// Package oplog is the multi-layer operation log of an agent: the AgentID and Mode that address it, the
// Layer contract every storage layer implements, the primary layer (one row per entry), and Stack, the
// oplog across its layers with the archive step that moves entries one layer down.
package oplog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	is "github.com/stratalog/strata/indexedstorage"
)

// Mode is how an agent's oplog is kept. Durable agents write the primary layer and are archived by
// scheduled rows; ephemeral agents write chunks straight into the first archive layer and are archived
// by the sweep.
type Mode string

const (
	Durable   Mode = "durable"
	Ephemeral Mode = "ephemeral"
)

// Modes lists every Mode.
var Modes = []Mode{Durable, Ephemeral}

// ParseMode reads "durable" or "ephemeral".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Durable, Ephemeral:
		return m, nil
	}
	return "", fmt.Errorf("%w: mode %q is not durable or ephemeral", ErrInvalidAgent, s)
}

// ErrInvalidAgent is returned for an agent id or key that cannot address an oplog.
var ErrInvalidAgent = errors.New("invalid agent")

// AgentID names an agent: the component it runs and its name within the component. Component ids
// contain no ':'; names may contain anything valid in a key.
type AgentID struct {
	Component string
	Name      string
}

// Key is the agent's key, Component + ":" + Name: how executors, the API and logs name it.
// ParseAgentKey is its inverse. Indexed layers store it under StoredKey.
func (a AgentID) Key() string { return a.Component + ":" + a.Name }

// StoredKey is the agent's key in every indexed layer (DESIGN §11): its bucket's prefix, then Key,
// "0a5b/c:a" for bucket 2651. The prefix is fixed-width, so keys sort by bucket and a shard's agents
// are one contiguous key range. ParseStoredKey is its inverse.
func (a AgentID) StoredKey() string { return is.BucketPrefix(a.Bucket()) + a.Key() }

// MaxKeyLen is the longest agent key: an indexed-storage key less its bucket prefix.
const MaxKeyLen = is.MaxKeyLen - is.BucketPrefixLen

func (a AgentID) String() string { return a.Key() }

// Validate checks the agent can address an oplog: a non-empty component without ':', a non-empty name,
// and a stored key that is a valid indexed-storage key (so Key is at most MaxKeyLen bytes).
func (a AgentID) Validate() error {
	if err := a.validParts(); err != nil {
		return err
	}
	if len(a.Key()) > MaxKeyLen {
		return fmt.Errorf("%w: key must be at most %d bytes (%d with its bucket prefix), got %d", ErrInvalidAgent,
			MaxKeyLen, is.MaxKeyLen, len(a.Key()))
	}
	if err := is.ValidateKey(a.StoredKey()); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAgent, err)
	}
	return nil
}

// validParts checks the component and name on their own: both non-empty, no ':' in the component.
func (a AgentID) validParts() error {
	switch {
	case a.Component == "":
		return fmt.Errorf("%w: empty component", ErrInvalidAgent)
	case strings.Contains(a.Component, ":"):
		return fmt.Errorf("%w: component %q contains ':'", ErrInvalidAgent, a.Component)
	case a.Name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidAgent)
	}
	return nil
}

// ParseAgentKey turns a storage key back into an AgentID, splitting at the first ':'. A key without
// ':', with an empty component or name, or that is not a valid key is ErrInvalidAgent.
func ParseAgentKey(key string) (AgentID, error) {
	component, name, ok := strings.Cut(key, ":")
	if !ok {
		return AgentID{}, fmt.Errorf("%w: key %q has no ':' between component and name", ErrInvalidAgent, key)
	}
	a := AgentID{Component: component, Name: name}
	if err := a.Validate(); err != nil {
		return AgentID{}, fmt.Errorf("key %q: %w", key, err)
	}
	return a, nil
}

// ParseStoredKey turns a key of an indexed layer back into an AgentID: a bucket prefix, then an agent
// key, the prefix that of the agent's own bucket. A key without a prefix, with a prefix of another
// bucket (a foreign writer hashed it differently), or whose rest is no agent key is ErrInvalidAgent:
// the sweep counts such a key unparseable and never archives it.
func ParseStoredKey(key string) (AgentID, error) {
	bucket, ok := is.KeyBucket(key)
	if !ok {
		return AgentID{}, fmt.Errorf("%w: stored key %q does not start with a bucket prefix (four hex digits and '/')", ErrInvalidAgent, key)
	}
	// Checked as it is stored, once: the parts below are then valid text too.
	if err := is.ValidateKey(key); err != nil {
		return AgentID{}, fmt.Errorf("%w: stored key: %v", ErrInvalidAgent, err)
	}
	rest := key[is.BucketPrefixLen:]
	component, name, ok := strings.Cut(rest, ":")
	if !ok {
		return AgentID{}, fmt.Errorf("%w: stored key %q has no ':' between component and name", ErrInvalidAgent, key)
	}
	a := AgentID{Component: component, Name: name}
	if err := a.validParts(); err != nil {
		return AgentID{}, fmt.Errorf("stored key %q: %w", key, err)
	}
	if b := keyBucket(rest); b != bucket {
		return AgentID{}, fmt.Errorf("%w: stored key %q has the prefix of bucket %d, its agent hashes to bucket %d", ErrInvalidAgent, key, bucket, b)
	}
	return a, nil
}

// Index is the position of an entry in an agent's oplog: 1-based and dense.
type Index uint64

// Entry is one oplog entry. Payloads are opaque to strata.
type Entry struct {
	Index   Index
	Payload []byte
}

// PrimaryNamespace is the indexed-storage namespace of the primary layer for mode: "{mode}/oplog".
func PrimaryNamespace(mode Mode) string { return string(mode) + "/oplog" }

// CompressedNamespace is the namespace of compressed archive level L (L ≥ 1): "{mode}/compressed/{L}".
func CompressedNamespace(mode Mode, level int) string {
	return string(mode) + "/compressed/" + strconv.Itoa(level)
}

// BlobIndexNamespace is the namespace of the index of packed blob level L: "{mode}/blobindex/{L}", a
// row per chunk, key the agent's stored key, id the chunk's last index (docs/storage-format.md).
func BlobIndexNamespace(mode Mode, level int) string {
	return string(mode) + "/blobindex/" + strconv.Itoa(level)
}
