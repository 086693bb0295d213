package multisqlite

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const fileExt = ".db"

// fileNameLen is the length of every index file's name: a hex SHA-256 and the extension.
const fileNameLen = 2*sha256.Size + len(fileExt)

// fileName names the file of (ns, key) by a hash of both, so that any key is safe in a file name and
// every name has the same length and alphabet. NUL separates the two; neither may contain one.
func fileName(ns, key string) string {
	sum := sha256.Sum256([]byte(ns + "\x00" + key))
	return hex.EncodeToString(sum[:]) + fileExt
}

// isFileName reports whether name is one fileName could have made: it keeps the SQLite side files
// (-wal, -shm) and anything else in the directory out of the listing, and rejects a resume token this
// backend did not mint.
func isFileName(name string) bool {
	if len(name) != fileNameLen || !strings.HasSuffix(name, fileExt) {
		return false
	}
	for i := 0; i < 2*sha256.Size; i++ {
		if c := name[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// maxDirName keeps an escaped namespace well within every file system's limit on a name (255 bytes).
const maxDirName = 200

// dirName maps a namespace (ValidateNamespace's alphabet, [A-Za-z0-9/._-]) to one directory name,
// injectively and safely on any file system: the "ns-" prefix keeps "." and ".." from meaning
// anything, '/' becomes '~' (neither is in the alphabet) so that namespaces never nest, and an
// upper-case letter becomes '^' and its lower case so that a case-insensitive file system cannot merge
// two namespaces. A name that would be too long is a hash of the namespace instead ("nh-").
func dirName(ns string) string {
	var b strings.Builder
	b.WriteString("ns-")
	for i := 0; i < len(ns); i++ {
		switch c := ns[i]; {
		case c == '/':
			b.WriteByte('~')
		case c >= 'A' && c <= 'Z':
			b.WriteByte('^')
			b.WriteByte(c - 'A' + 'a')
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > maxDirName {
		sum := sha256.Sum256([]byte(ns))
		return "nh-" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// listings caches each namespace's sorted file names, so that a walk lists its directory once rather
// than once a page. This process is the only writer it knows of, so a listing stays valid until this
// process creates a file in the namespace (dropped then); the TTL is only a backstop for files made by
// something else.
type listings struct {
	ttl    time.Duration // ≤ 0: no expiry
	onList func(ns string)

	mu    sync.Mutex
	byNS  map[string]*listing
	count int64 // directory listings made
}

type listing struct {
	names []string // sorted; never changed once published, so readers keep it without the lock
	at    time.Time
	valid bool
	gen   uint64 // bumped by every drop, so a listing begun before a drop is not stored after it
}

func newListings(ttl time.Duration, onList func(ns string)) *listings {
	return &listings{ttl: ttl, onList: onList, byNS: make(map[string]*listing)}
}

// get returns the sorted names of the index files in dir, the directory of ns: the cached listing if
// it is still valid, else a new one. A missing directory is an empty listing.
func (l *listings) get(ns, dir string) ([]string, error) {
	l.mu.Lock()
	cur := l.byNS[ns]
	if cur == nil {
		cur = &listing{}
		l.byNS[ns] = cur
	}
	if cur.valid && (l.ttl <= 0 || time.Since(cur.at) < l.ttl) {
		names := cur.names
		l.mu.Unlock()
		return names, nil
	}
	gen := cur.gen
	l.count++
	l.mu.Unlock()

	if l.onList != nil {
		l.onList(ns)
	}
	at := time.Now()
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if cur.gen == gen {
		cur.names, cur.at, cur.valid = names, at, true
	}
	l.mu.Unlock()
	return names, nil
}

// drop forgets the listing of ns; the next get lists the directory again.
func (l *listings) drop(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.byNS[ns]; cur != nil {
		cur.valid = false
		cur.gen++
	}
}

func (l *listings) made() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// readNames lists dir's index files in byte order (os.ReadDir sorts by name).
func readNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("multisqlite: list %s: %w", filepath.Base(dir), err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if name := e.Name(); isFileName(name) && e.Type().IsRegular() {
			names = append(names, name)
		}
	}
	return names, nil
}
