// Package version says which build of strata is running, from what the Go toolchain recorded in the
// binary: the module version, the VCS commit and whether the tree was modified, and the Go version;
// and the branch, which the toolchain does not record, when the build names it (deploy/build.sh).
package version

import (
	"runtime/debug"
	"sync"
)

// Info is one build's identity.
type Info struct {
	Version   string // the main module's version: a tag, a pseudo-version, or "(devel)" for a local build
	Commit    string // the VCS revision the binary was built from, "" if not recorded
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string // the toolchain that built it, e.g. go1.26.8
	Branch    string // the VCS branch the build named (Branch, set at link time), "" if it named none
}

// Revision is the commit, with "-modified" after it when the work tree had uncommitted changes (as
// strata_build_info's revision label shows it); "" if no commit was recorded.
func (i Info) Revision() string {
	if i.Commit != "" && i.Modified {
		return i.Commit + "-modified"
	}
	return i.Commit
}

// Override is set at link time by a release build (-ldflags "-X .../internal/version.Override=v1.2.3")
// when the module version the toolchain records is not the release's name.
var Override string

// Branch and Commit are set at link time by deploy/build.sh (-ldflags "-X .../internal/version.Branch=main"):
// Branch to the branch the binary was built from, which the Go toolchain does not record; Commit to
// the commit when the toolchain cannot record it (a build context without .git, as the Dockerfile's).
var Branch, Commit string

var read = sync.OnceValue(func() Info {
	info := Info{Version: "(devel)"}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		info.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if Override != "" {
		info.Version = Override
	}
	info.Branch = Branch
	if info.Commit == "" {
		info.Commit = Commit
	}
	return info
})

// Get returns the running binary's build identity.
func Get() Info { return read() }

// String is the one-line form `strata version` prints.
func (i Info) String() string {
	s := "strata " + i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " commit " + c
		if i.Modified {
			s += " (modified)"
		}
	}
	return s + " " + i.GoVersion
}
