package indexedstorage

import "fmt"

// Resume says where a ScanStable walk continues. The zero value means "from the beginning". A backend
// mints the others with MarkerResume, FileResume or CursorResume and reads them back with the matching
// accessor; to every other code a Resume is opaque. Tokens live in memory only: they are never
// persisted, so a token cannot outlive the process (and the backend) that minted it.
type Resume struct {
	kind   resumeKind
	marker string
	cursor uint64
}

type resumeKind uint8

const (
	resumeStart resumeKind = iota
	resumeMarker
	resumeFile
	resumeCursor
)

// MarkerResume continues an ordered walk after lastKey, the last key the backend handed back.
func MarkerResume(lastKey string) Resume { return Resume{kind: resumeMarker, marker: lastKey} }

// FileResume continues a walk over a set of files after file, the last file the backend finished.
func FileResume(file string) Resume { return Resume{kind: resumeFile, marker: file} }

// CursorResume continues a walk from a backend's own iteration cursor, for a backend with no order to
// seek in but a cursor that tolerates deletion (Redis SCAN).
func CursorResume(cursor uint64) Resume { return Resume{kind: resumeCursor, cursor: cursor} }

// IsStart reports whether r is the zero value, the start of a walk.
func (r Resume) IsStart() bool { return r.kind == resumeStart }

// Marker returns the key of a marker token. It fails with ErrInvalidArgument for any other kind of
// token; the zero Resume returns ("", true, nil) meaning "start".
func (r Resume) Marker() (lastKey string, start bool, err error) {
	return r.expect(resumeMarker)
}

// File returns the file of a file token, like Marker.
func (r Resume) File() (file string, start bool, err error) {
	return r.expect(resumeFile)
}

// Cursor returns the cursor of a cursor token; the zero Resume returns (0, true, nil).
func (r Resume) Cursor() (cursor uint64, start bool, err error) {
	switch {
	case r.kind == resumeStart:
		return 0, true, nil
	case r.kind != resumeCursor:
		return 0, false, fmt.Errorf("%w: resume token is a %s, this backend takes a cursor", ErrInvalidArgument, r.kind)
	case r.cursor == 0:
		// 0 is how a cursor walk says "done"; a page that is done returns the zero Resume instead.
		return 0, false, fmt.Errorf("%w: cursor resume token of 0 is malformed", ErrInvalidArgument)
	}
	return r.cursor, false, nil
}

func (r Resume) expect(kind resumeKind) (string, bool, error) {
	switch {
	case r.kind == resumeStart:
		return "", true, nil
	case r.kind != kind:
		return "", false, fmt.Errorf("%w: resume token is a %s, this backend takes a %s", ErrInvalidArgument, r.kind, kind)
	case r.marker == "":
		return "", false, fmt.Errorf("%w: empty %s resume token", ErrInvalidArgument, kind)
	}
	return r.marker, false, nil
}

// String describes the token for logs; it is not a serialisation.
func (r Resume) String() string {
	switch r.kind {
	case resumeMarker, resumeFile:
		return fmt.Sprintf("%s(%q)", r.kind, r.marker)
	case resumeCursor:
		return fmt.Sprintf("cursor(%d)", r.cursor)
	}
	return "start"
}

func (k resumeKind) String() string {
	switch k {
	case resumeMarker:
		return "marker"
	case resumeFile:
		return "file"
	case resumeCursor:
		return "cursor"
	}
	return "start"
}

// Page is one ScanStable result. Keys may be empty without Done (a backend whose pages come back short).
// When Done is true the walk is complete and Next is the zero Resume.
type Page struct {
	Keys []string
	// LastIDs, when the backend sets it, holds the greatest id of each key of Keys, read with the page
	// (LastIDs[i] is Keys[i]'s LastID then): a backend that can read them in the page's own query
	// (SQL's max(id) … GROUP BY key) saves its caller a LastID call per key. Nil when it does not.
	LastIDs []uint64
	// Stamps, when the backend sets it, holds a token of each key's index state taken without reading
	// the index (Stamps[i] is Keys[i]'s): two walks that hand back the same non-empty stamp for a key
	// saw the index unchanged in between (no append, drop or delete, and no delete and re-create).
	// An empty stamp vouches for nothing (the backend could not tell, say because the index changed
	// too recently for its clock to separate a later change). A backend whose pages carry LastIDs
	// need not set it. Multi-file SQLite sets it from each file's metadata, so that a caller that
	// only wants to know whether an index moved between two walks need not open the file.
	Stamps []string
	Next   Resume
	Done   bool
	// Unreadable lists what this page passed over because the backend could not read it: one index
	// whose own storage is broken (a multi-file SQLite file that is not a database) fails that index,
	// never the page or the walk. The walk moves past it; a caller counts it and meets it again on
	// its next walk. Empty on a backend whose walk reads no per-index storage.
	Unreadable []Unreadable
}

// Unreadable is one index a walk could not read.
type Unreadable struct {
	// Key is the index's key when the backend could tell it, else "" (a file whose name is a hash of
	// its key and whose content cannot be read).
	Key string
	// Where names what could not be read, for an operator: the file, or the key.
	Where string
	Err   error
}

// Kind names the kind of token: "start", "marker", "file" or "cursor".
func (r Resume) Kind() string { return r.kind.String() }
