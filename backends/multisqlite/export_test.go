package multisqlite

// What the external test package's harness needs of the package's insides.

// Poison is the harness's Poison (poison).
var Poison = poison

// RawWalk is the harness's RawWalk (rawWalk).
var RawWalk = rawWalk

// ShareEveryNamespace keeps every namespace of st in one shared file, as Shared ones are.
func ShareEveryNamespace(st *Store) { st.shareAll = true }

// SharedPoison is the harness's Poison for a store that shares every namespace (sharedPoison).
var SharedPoison = sharedPoison
