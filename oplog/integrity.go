package oplog

// ErrIntegrity is what every integrity failure is (errors.Is): stored data that fails a check (a
// chunk's checksum, its parse) or indices an agent reused. Unlike a timeout or a refused call, no
// retry fixes it: the data waits for an operator, and the sweep counts it as integrity_failed.
var ErrIntegrity error = &integrityError{text: "oplog integrity failure"}

// NewIntegrityError returns a sentinel whose text is text and that is ErrIntegrity too: a layer's own
// sentinel for data that fails its checks (archive.ErrCorruptChunk).
func NewIntegrityError(text string) error { return &integrityError{text: text} }

type integrityError struct{ text string }

func (e *integrityError) Error() string { return e.text }

func (e *integrityError) Is(target error) bool { return target == ErrIntegrity }
