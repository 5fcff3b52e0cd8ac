package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Shell-free command lines: the rules are in the package documentation
// ("Command lines").

// shellWords are the words that must reach the shell: its keywords, and
// its builtins, which differ from binaries of the same name (dash's echo
// interprets escapes, pwd is logical, cd and export change the shell
// itself).
var shellWords = func() map[string]bool {
	m := make(map[string]bool)
	for _, w := range strings.Fields(`
		! { } [[ ]] case do done elif else esac fi for function if in select
		then time until while
		. : [ alias bg break builtin cd command continue echo eval exec exit
		export false fc fg getopts hash jobs kill let local newgrp printf pwd
		read readonly return set shift source test times trap true type
		typeset ulimit umask unalias unset wait`) {
		m[w] = true
	}
	return m
}()

// plainByte reports whether c can appear in a line the agent runs without
// a shell.
func plainByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte(" \t-_./:,+@%=", c) >= 0
}

// splitPlain splits a command line into words when the shell would do no
// more than that (see the rules above, except the lookup), and reports
// whether it did.
func splitPlain(line string) ([]string, bool) {
	for i := 0; i < len(line); i++ {
		if !plainByte(line[i]) {
			return nil, false
		}
	}
	words := strings.Fields(line)
	if len(words) > 0 && words[0] == "exec" {
		words = words[1:]
	}
	if len(words) == 0 {
		return nil, false
	}
	w := words[0]
	if shellWords[w] || w[0] == '-' || strings.IndexByte(w, '=') >= 0 {
		return nil, false
	}
	return words, true
}

// shellFree returns the program path and argv that run line without a
// shell in dir with environment env (the last PATH in it counts), or ok
// false when the line needs the shell.
func shellFree(line string, env []string, dir string) (path string, argv []string, ok bool) {
	words, ok := splitPlain(line)
	if !ok {
		return "", nil, false
	}
	path, ok = findProgram(words[0], lastEnv(env, "PATH"), dir)
	if !ok {
		return "", nil, false
	}
	return path, words, true
}

// lastEnv returns the value of the last key=value entry of env for key.
func lastEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// findProgram resolves a command word the way the shell does, and returns
// the path to execute, which is also what a script sees as $0: a word with
// a slash is used as it is (relative to dir, where the program runs), others
// are looked up in the directories of pathList as dir + "/" + word. A
// relative or empty PATH entry gives up (the shell handles those); so does
// a word that names no executable regular file.
func findProgram(word, pathList, dir string) (string, bool) {
	if strings.IndexByte(word, '/') >= 0 {
		p := word
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		return word, executable(p)
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			return "", false
		}
		if p := strings.TrimSuffix(d, "/") + "/" + word; executable(p) {
			return p, true
		}
	}
	return "", false
}

// executable reports whether p is a regular file with an execute bit.
func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// mainCommand builds the exec.Cmd of a hook or COMMAND of Main, which runs
// in dir with the agent's environment: `/bin/sh -c LINE` with a plain LINE
// runs the program directly.
func mainCommand(argv []string, dir string) *exec.Cmd {
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		if path, words, ok := shellFree(argv[2], os.Environ(), dir); ok {
			cmd := exec.Command(path, words[1:]...)
			cmd.Args[0] = words[0]
			return cmd
		}
	}
	return exec.Command(argv[0], argv[1:]...)
}
