package selftest

// bug names one deliberate defect of the reference store; the zero bug is none. Its value is the
// mutant's name, as TestMutant and the subprocesses know it.
type bug string

const (
	// ScanStable.
	bugPositionalResume         bug = "positionalResume"
	bugResumeInclusive          bug = "resumeInclusive"
	bugResumeInclusiveUnordered bug = "resumeInclusiveUnordered"
	bugUnescapedPrefix          bug = "unescapedPrefix"
	bugForeignTokenRestarts     bug = "foreignTokenRestarts"
	bugPageOverCount            bug = "pageOverCount"
	bugNamespaceJoinedBySlash   bug = "namespaceJoinedBySlash"
	bugResumeLosesDeletedMarker bug = "resumeLosesDeletedMarker"
	bugPrefixEndUnbounded       bug = "prefixEndUnbounded"
	bugRangeEndInclusive        bug = "rangeEndInclusive"
	bugRangeStartExclusive      bug = "rangeStartExclusive"
	bugPageFirstIDs             bug = "pageFirstIDs"

	// Writes.
	bugNonAtomicAppendMany     bug = "nonAtomicAppendMany"
	bugLazyIDValidation        bug = "lazyIDValidation"
	bugConflictOnlyOnEqualID   bug = "conflictOnlyOnEqualID"
	bugLostRacingAppend        bug = "lostRacingAppend"
	bugEmptyBatchCreatesIndex  bug = "emptyBatchCreatesIndex"
	bugEmptyBatchShortCircuits bug = "emptyBatchShortCircuits"
	bugLastIDOutlivesDelete    bug = "lastIDOutlivesDelete"

	// Emptied and deleted indexes.
	bugEmptiedIndexExists         bug = "emptiedIndexExists"
	bugEmptiedIndexScanned        bug = "emptiedIndexScanned"
	bugLengthNotDecrementedByDrop bug = "lengthNotDecrementedByDrop"
	bugLengthFromIDSpan           bug = "lengthFromIDSpan"
	bugDropCountsRange            bug = "dropCountsRange"
	bugDeleteSkipsValidation      bug = "deleteSkipsValidation"
	bugDeleteIgnoresClose         bug = "deleteIgnoresClose"
	bugClosestCreatesIndex        bug = "closestCreatesIndex"
	bugFirstNotMovedByDrop        bug = "firstNotMovedByDrop"

	// Ranges.
	bugReadExcludesTo         bug = "readExcludesTo"
	bugReadUnclamped          bug = "readUnclamped"
	bugClosestStrictlyAbove   bug = "closestStrictlyAbove"
	bugClosestLastIsClosest   bug = "closestLastIsClosest"
	bugClosestLastTwoInstants bug = "closestLastTwoInstants"
	bugDropPrefixExclusive    bug = "dropPrefixExclusive"
	bugDropPrefixUpToOverflow bug = "dropPrefixUpToOverflow"

	// Values handed out or kept.
	bugAliasRead       bug = "aliasRead"
	bugAliasFirstLast  bug = "aliasFirstLast"
	bugAliasAppend     bug = "aliasAppend"
	bugAliasAppendMany bug = "aliasAppendMany"

	// Key identity.
	bugCaseFold          bug = "caseFold"
	bugTrailingSpaceFold bug = "trailingSpaceFold"
	bugNormalisationFold bug = "normalisationFold"

	// Atomicity against concurrent callers.
	bugPartialDrop           bug = "partialDrop"
	bugDoubleCountedDrops    bug = "doubleCountedDrops"
	bugNonLinearizableDelete bug = "nonLinearizableDelete"

	// Unreadable indexes.
	bugPoisonFailsPage       bug = "poisonFailsPage"
	bugPoisonIsTransient     bug = "poisonIsTransient"
	bugUnreadableNotAdvanced bug = "unreadableNotAdvanced"

	// Handles and contexts.
	bugReopenLosesEntries    bug = "reopenLosesEntries"
	bugCancelledWriteApplied bug = "cancelledWriteApplied"
	bugCancelIsTransient     bug = "cancelIsTransient"
	bugDeadContextPassesOver bug = "deadContextPassesOver"
)

// mutant is one bug and what it stands for.
type mutant struct {
	bug  bug
	what string
}

// mutants is every bug the suite must catch. Each is a defect a real backend has had or could
// plausibly have; the line that carries it is in store_test.go, behind a check of its bug.
var mutants = []mutant{
	{bugPositionalResume, "ScanStable resumes at an offset (a cursor token counting keys), so a key deleted behind the cursor makes the walk skip one"},
	{bugResumeInclusive, "ScanStable resumes with >= instead of >: the marker key comes back at the top of the next page (pages of one never advance)"},
	{bugResumeInclusiveUnordered, "as resumeInclusive, on a backend declaring no capabilities, so only a walk that never ends shows it"},
	{bugUnescapedPrefix, "the prefix is a LIKE pattern: '_' matches any character, '%' any run"},
	{bugForeignTokenRestarts, "a Resume of another kind, or malformed, silently restarts the walk instead of failing with ErrInvalidArgument"},
	{bugPageOverCount, "ScanStable hands back its look-ahead key: count+1 keys on an ordered backend"},
	{bugNamespaceJoinedBySlash, "one flat keyspace of ns+\"/\"+key: ns \"a\" key \"b/c\" is ns \"a/b\" key \"c\", and a walk of \"a\" lists the keys of \"a/b\""},

	{bugResumeLosesDeletedMarker, "ScanStable looks its marker up as a key: when the caller deleted the last key handed back, the walk ends early"},

	{bugPrefixEndUnbounded, "a range with no upper bound (the range of a prefix made only of U+10FFFF, or an open range) is taken for an empty interval: the walk returns nothing"},
	{bugRangeEndInclusive, "a range's End is taken as inclusive: a key equal to End is handed back"},
	{bugRangeStartExclusive, "a range's Start is taken as exclusive: a key equal to Start is never handed back"},
	{bugPageFirstIDs, "a page's LastIDs are each key's first id (min for max in the page query)"},

	{bugNonAtomicAppendMany, "AppendMany writes row by row, checking each against the last: a conflict in the batch leaves the rows before it"},
	{bugLazyIDValidation, "AppendMany checks each id's range when writing its row: an id out of range leaves the rows before it"},
	{bugConflictOnlyOnEqualID, "only a primary key on the id guards Append: an id below the last that is free is inserted, not a conflict"},
	{bugLostRacingAppend, "Append checks the last id under the read lock, lets go, then writes what it read plus the batch: a racing append is lost"},

	{bugEmptyBatchCreatesIndex, "an empty AppendMany upserts the index's row, so it creates an index holding nothing"},

	{bugEmptyBatchShortCircuits, "an empty AppendMany returns nil before validating its arguments or checking Close"},
	{bugLastIDOutlivesDelete, "a last-id record beside the entries survives Delete, so a re-created index conflicts with the deleted one's ids"},

	{bugEmptiedIndexExists, "DropPrefix that empties an index leaves it behind: Exists is true"},
	{bugEmptiedIndexScanned, "DropPrefix that empties an index leaves its key where scans find it"},
	{bugLengthNotDecrementedByDrop, "Length is a counter of appends that DropPrefix forgets to decrement"},
	{bugLengthFromIDSpan, "Length is last id - first id + 1, as if ids were dense"},
	{bugDropCountsRange, "DropPrefix reports the span of ids it dropped, as if ids were dense, not how many entries"},
	{bugDeleteSkipsValidation, "Delete does not validate its namespace and key: a bad one returns nil"},
	{bugDeleteIgnoresClose, "Delete after Close returns nil instead of ErrClosed"},

	{bugClosestCreatesIndex, "Closest on a missing index creates it, empty (a get-or-create lookup on the read path): Exists is then true"},
	{bugFirstNotMovedByDrop, "First returns a cached first entry that DropPrefix does not move"},

	{bugReadExcludesTo, "Read is the half-open range [from, to)"},
	{bugReadUnclamped, "Read binds to as a signed integer: to = 2^64-1 becomes -1 and reads nothing"},
	{bugClosestStrictlyAbove, "Closest returns the smallest id > id instead of >= id"},
	{bugClosestLastIsClosest, "ClosestLast returns the entry it found as the last one"},
	{bugClosestLastTwoInstants, "ClosestLast reads the last id and the closest entry under two locks, not one, so an append or a drop between them shows in one and not the other"},
	{bugDropPrefixExclusive, "DropPrefix drops ids < upTo instead of <= upTo"},
	{bugDropPrefixUpToOverflow, "DropPrefix(upTo) computes upTo+1, which wraps to 0 for upTo = 2^64-1 and drops nothing"},

	{bugAliasRead, "Read hands out the stored value slices: editing a returned value edits the store"},
	{bugAliasFirstLast, "First, Last and Closest hand out the stored value slice"},
	{bugAliasAppend, "Append keeps the caller's slice instead of a copy"},
	{bugAliasAppendMany, "AppendMany keeps the caller's slices instead of copies (Append copies)"},

	{bugCaseFold, "keys are compared case-insensitively (a folding collation): \"K\" and \"k\" are one index"},
	{bugTrailingSpaceFold, "trailing spaces are trimmed before keys are compared (a PAD SPACE collation): \"k \" and \"k\" are one index"},
	{bugNormalisationFold, "keys are compared after Unicode normalisation: NFD \"e\\u0301\" and NFC \"\\u00e9\" are one index"},

	{bugPartialDrop, "DropPrefix removes one entry per lock, so a concurrent reader sees First move mid-drop"},
	{bugDoubleCountedDrops, "DropPrefix counts under the read lock and drops under the write lock: two racing drops both count the same entries"},
	{bugNonLinearizableDelete, "Delete removes the ids it saw when it started (PostgreSQL's DELETE under READ COMMITTED): an Append committed meanwhile survives"},

	{bugPoisonFailsPage, "one unreadable index fails the whole ScanStable page instead of being listed in Unreadable"},
	{bugUnreadableNotAdvanced, "ScanStable's marker moves past healthy keys only: an unreadable index ending a page is handed back again on every later page"},
	{bugPoisonIsTransient, "an unreadable index's errors are classified ErrTransient, so callers retry a read that cannot succeed"},

	{bugReopenLosesEntries, "writes stay in the handle's buffer and are never persisted: a second handle on the same storage finds it empty"},
	{bugCancelledWriteApplied, "Append checks the caller's context after committing: it reports context.Canceled for an entry it wrote"},
	{bugCancelIsTransient, "the caller's cancellation is classified ErrTransient, so a retry loop retries what its caller abandoned"},
	{bugDeadContextPassesOver, "ScanStable under a dead context passes every index over as unreadable (each read's context error taken for the index's fault) instead of failing the page"},
}

// lookup returns the mutant of that name; "reference" is the store with no bug.
func lookup(name string) (bug, bool) {
	if name == referenceName {
		return "", true
	}
	for _, m := range mutants {
		if string(m.bug) == name {
			return m.bug, true
		}
	}
	return "", false
}

const referenceName = "reference"
