package indexedstorage

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNamespaceLen is the longest namespace, in bytes.
const MaxNamespaceLen = 128

// ValidateNamespace checks a namespace: 1–128 bytes of ASCII letters, digits and '/', '-', '_', '.'.
// Namespaces are made by code, not by users ("ephemeral/compressed/1"), so the alphabet is kept small
// enough that every backend can use a namespace verbatim in a key, a file name or a pattern, and
// ':' is free to separate a namespace from a key.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: namespace must be 1-%d bytes, got %d", ErrInvalidArgument, MaxNamespaceLen, len(ns))
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '/', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("%w: namespace %q: byte %q is not one of [A-Za-z0-9/._-]", ErrInvalidArgument, ns, c)
		}
	}
	return nil
}

// ValidateKey checks a key: valid UTF-8, 1–1024 bytes, no NUL.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key must be 1-%d bytes, got %d", ErrInvalidArgument, MaxKeyLen, len(key))
	}
	return validateText("key", key)
}

// ValidatePrefix checks a scan prefix: like a key, but it may be empty (every key matches).
func ValidatePrefix(prefix string) error {
	if len(prefix) > MaxKeyLen {
		return fmt.Errorf("%w: prefix must be at most %d bytes, got %d", ErrInvalidArgument, MaxKeyLen, len(prefix))
	}
	return validateText("prefix", prefix)
}

func validateText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, what, s)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s %q contains NUL", ErrInvalidArgument, what, s)
	}
	return nil
}

// ValidateIndex checks a namespace and key together, the first thing every per-index operation does.
func ValidateIndex(ns, key string) error {
	if err := ValidateNamespace(ns); err != nil {
		return err
	}
	return ValidateKey(key)
}

// ValidateScan checks the arguments of Scan and ScanStable.
func ValidateScan(ns, prefix string, count int) error {
	if err := ValidateNamespace(ns); err != nil {
		return err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	if count < 1 {
		return fmt.Errorf("%w: scan count must be at least 1, got %d", ErrInvalidArgument, count)
	}
	return nil
}

// ValidateID checks an id being written: 1..MaxID.
func ValidateID(id uint64) error {
	if id == 0 || id > MaxID {
		return fmt.Errorf("%w: id %d is outside 1..%d", ErrInvalidArgument, id, MaxID)
	}
	return nil
}

// ValidateBatch checks an AppendMany batch on its own: every id valid (ErrInvalidArgument) and ids
// strictly increasing (ErrConflict: a later entry would not be above the one written before it). What
// remains for the backend is to compare the first id with the index's last, atomically with the write.
func ValidateBatch(entries []Entry) error {
	for i, e := range entries {
		if err := ValidateID(e.ID); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].ID <= entries[i-1].ID {
			return fmt.Errorf("%w: entry %d has id %d, not above the previous id %d", ErrConflict, i, entries[i].ID, entries[i-1].ID)
		}
	}
	return nil
}

// ClampRange turns Read's bounds into ids: from 0 becomes 1 and to above MaxID becomes MaxID. ok is
// false when the range holds no id.
func ClampRange(from, to uint64) (lo, hi uint64, ok bool) {
	lo, hi = max(from, 1), min(to, MaxID)
	return lo, hi, lo <= hi
}

// PrefixEnd returns the smallest string greater than every string that starts with prefix, so that a
// backend can bound a literal prefix match by the interval [prefix, end) and seek on an index instead of
// using LIKE or a glob. The result is valid UTF-8 (it increments the last code point, not the last
// byte, so a database that validates text accepts it), which is sound because UTF-8 byte order is code
// point order. bounded is false when no such string exists (an empty prefix, or one made only of
// U+10FFFF): the interval is then [prefix, ∞).
func PrefixEnd(prefix string) (end string, bounded bool) {
	for prefix != "" {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF:
			r = 0xE000 // skip the surrogate range, which UTF-8 cannot encode
		default:
			r++
		}
		return prefix + string(r), true
	}
	return "", false
}
