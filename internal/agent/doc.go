// Package agent is berth's in-sandbox agent: a mode of the berth binary
// (`berth agent`, see Main) that runs inside each replica's sandbox and
// serves command execution, terminal sessions and file operations over a
// local stream socket, and the Client that talks to it.
//
// Deployments' exec and shell go through the agent, and so will Computers
// and the VM drivers (the same protocol over vsock or a virtio port), so
// the protocol is designed once, versioned, and independent of the
// transport: any net.Conn will do.
//
// # Protocol, version 1
//
// HTTP/1.1 over the stream connection, every path under /v1 (an
// incompatible change starts /v2; GET /v1/info reports protocol 1).
// Request and answer bodies are JSON unless noted. Every error is answered
// with a JSON body {"error": "..."} and a status: 400 malformed request,
// 403 path outside the root or permission denied, 404 no such endpoint or
// file, 405 wrong method, 409 exists / not empty / is a directory / an
// edit or patch does not apply, 412 a file's expected_sha256 does not
// match, 413 body or file too large, 415 not text, 422 the command could
// not start, 500 anything else.
// Unknown JSON fields are ignored.
//
//	GET    /v1/info                       Info
//	POST   /v1/exec                       ExecRequest → ExecResult
//	GET    /v1/exec/stream                websocket: streaming exec
//	GET    /v1/pty                        websocket: terminal session
//	GET    /v1/files?path=&offset=&limit= raw bytes (headers X-File-Size, X-File-Sha256)
//	PUT    /v1/files?path=&mode=          raw bytes → FileInfo with sha256 (atomic replace)
//	DELETE /v1/files?path=&recursive=     204
//	GET    /v1/files/stat?path=           FileInfo (lstat)
//	GET    /v1/files/list?path=           ListResult, sorted by name
//	POST   /v1/files/mkdir                MkdirRequest → FileInfo (201, or 200 if it existed)
//	POST   /v1/files/read                 ReadTextRequest → ReadTextResult (text, by lines)
//	POST   /v1/files/write                WriteRequest → WriteResult (atomic replace)
//	POST   /v1/files/glob                 GlobRequest → GlobResult, newest first
//	POST   /v1/files/grep                 GrepRequest → GrepResult
//	POST   /v1/files/edit                 EditRequest → EditResult (exact replacements)
//	POST   /v1/files/patch                PatchRequest → PatchResult (unified diff)
//	POST   /v1/processes                  ProcessRequest → ProcessStarted (201)
//	GET    /v1/processes                  ProcessList, in start order
//	GET    /v1/processes/{id}             ProcessInfo
//	GET    /v1/processes/{id}/output?offset=&limit= raw bytes (headers X-File-Size, X-Process-Running)
//	DELETE /v1/processes/{id}?signal=     ProcessInfo (default SIGTERM, to the group)
//	POST   /v1/assign                     GuestConfig → 204 (spares only; 409 elsewhere)
//
// # Exec
//
// A command is argv (run directly, looked up in PATH) or command (run as
// /bin/sh -c), in cwd (default the agent's --workdir), with the agent's
// environment plus env. It runs in a process group of its own. When
// timeout_ms elapses, or the client goes away (closes the connection of a
// buffered exec, or the session of a streaming one), the whole group is
// killed with SIGKILL; a timed-out command reports timed_out and exit code
// 124. A command killed by signal N reports 128+N and the signal's name.
// After the command exits its output is read for at most one more second,
// in case a background child inherited the pipes. Buffered exec keeps at
// most 16 MiB of stdout plus stderr (max_output lowers it), reads and
// drops the rest, and sets truncated. Output interleaves both streams in
// the order the agent read them. Stdin and outputs travel as JSON strings,
// or as base64 with "encoding":"base64" (what Client does, so bytes are
// exact).
//
// # Command lines
//
// A command line (an exec's or background process's command, a --setup
// hook, or a COMMAND of the form `/bin/sh -c LINE`, which is how the
// process driver passes start commands) costs a spawn of /bin/sh before the
// program itself runs. When the line is a plain
// program with plain words, the shell adds nothing, so the agent runs the
// program directly:
//
//   - every byte is an ASCII letter or digit, a space, a tab, or one of
//     the punctuation characters in "-_./:,+@%=", so no quoting, expansion
//     ($, `, ~, globs), redirection, pipeline, list, comment, subshell or
//     escape can occur;
//   - an optional leading "exec " is dropped (the shell would replace
//     itself with the program, which is what running it directly does);
//   - the first word names no shell keyword or builtin (those behave as
//     the shell's, not as a binary of the same name: echo, pwd, cd, true,
//     ...), starts with no '-' and holds no '=' (a variable assignment);
//   - the program is found: a word with a '/' is a path (relative to the
//     working directory), else it is looked up in the absolute directories
//     of the command's own PATH, as the shell would; a program that is not
//     found (or a relative PATH entry) is left to the shell, so its error
//     and exit code 127 are the shell's.
//
// Otherwise the line runs as /bin/sh -c LINE. Either way the program gets
// the same arguments (argv[0] as written), environment, working directory
// and process group. One difference can be visible, and is the truth: a
// program killed by a signal is reported as killed by it, where a shell
// that forked it (rather than replacing itself) exits with 128+N.
//
// # Spare agents
//
// Starting the agent costs a process spawn and the berth binary's start-up
// (tens of milliseconds) before the app can even begin, which
// scale-from-zero pays in full. So the process driver keeps a few
// agents started ahead of time, idle: `berth agent --listen ADDR --spare`
// listens on ADDR and serves only
//
//	POST /v1/assign   GuestConfig → 204
//
// until a replica is handed to it. The assignment carries what a cold
// start puts on the command line and in the environment: Args (the
// agent's flags and COMMAND, parsed exactly as on the command line, on top
// of the flags the spare was started with), Env (the complete environment
// of the agent, hooks, COMMAND and execs), Hostname (set with
// sethostname; the spare must have a UTS namespace of its own) and Files
// (written first, e.g. a lease). From then on the agent is that replica's,
// exactly as if it had been started with those arguments, and keeps
// serving on the listener it already has: --listen in Args only names
// where the socket is now (the driver renames the spare's directory; a
// bound unix socket keeps working through that). Where it can, the agent
// also rewrites its command line (/proc/PID/cmdline) to show the assigned
// arguments within the room the spare was started with (--spare-room), so
// ps and tools that find agents by their arguments see the replica's.
//
// A spare is single-use: a bad assignment is answered 400 and the spare
// exits (status 2); a second assignment is answered 409. Other requests
// are answered 503 until the assignment. SIGTERM, SIGINT or the end of
// Main's context end a spare with status 0.
//
// With --spare-fd N (a stream socket or pipe inherited from the driver) the
// spare writes "ready\n" to it once it listens, and exits when the other
// end goes away (end of file) before the assignment: spares die with the
// berth that started them instead of idling forever.
//
// # Sessions
//
// /v1/exec/stream and /v1/pty are websockets. The client's first message
// is the request (ExecRequest or PTYRequest) as a text message. Then:
//
//   - Binary messages carry data, the first byte naming the channel:
//     0 stdin (client to agent; for a PTY, keyboard input), 1 stdout (or
//     everything a terminal prints), 2 stderr.
//   - Text messages are Control JSON: from the client {"type":"eof"}
//     (close stdin; ignored by a PTY, where EOF is ^D typed as data),
//     {"type":"resize","cols":C,"rows":R} (PTY only) and
//     {"type":"signal","signal":"TERM"} (to the process group); from the
//     agent, last, either {"type":"exit","exit_code":N,"signal":...,
//     "timed_out":...} after all output, or {"type":"error","error":"...",
//     "status":N} when the request was bad (400) or the command could not
//     start (422). The agent then closes normally.
//
// The agent kills the command's process group when the session ends
// early. A PTY command runs as a session leader with the terminal as
// controlling terminal, TERM=xterm-256color unless the request's env sets
// it, 80x24 unless sized, and $SHELL (or /bin/sh) when no command is given.
//
// # Files
//
// Paths are absolute. With Options.Root (--root) they name files beneath
// that directory, opened through os.Root, so neither ".." nor a symlink
// can lead outside it; without a root they are used as given and the
// sandbox is the wall. Writes go to a temp file in the same directory that
// is fsynced and renamed over the target, so readers never see a partial
// file; mode defaults to the replaced file's, or 0644. Every write, edit
// and patch answers each file's path, new size and SHA-256 (berth's
// files.written facts); GET /v1/files reports the SHA-256 of the whole
// file, and write and edit take it back as expected_sha256, failing with
// 412 when the file has changed since. The agent serializes those
// check-and-replace steps per root, so two of its clients cannot clobber
// each other; a process in the sandbox that writes files itself is not
// held by that lock.
//
// read returns a window of lines (offset_line is 1-based; limit_lines 0
// means all) of a UTF-8 file, refusing NUL bytes and invalid UTF-8 with
// 415. read, edit and patch hold files in memory and refuse those over
// MaxTextFile (10 MiB) with 413; GET and PUT stream any size.
//
// glob matches doublestar patterns (*, **, ?, [..], {a,b}) against file
// paths relative to path (default /), and answers regular files, newest
// first. grep matches an RE2 expression line by line, skipping files with
// a NUL byte in their first 8000 bytes and files over MaxTextFile; its
// glob filters base names, or relative paths when it holds a slash. Both
// walk real directories only: a symlink to a file counts as that file
// (resolved inside the root), a symlinked directory is never entered, so
// walks neither loop nor leave the root. Walks stop after MaxWalkEntries
// entries and grep after MaxGrepBytes, answering truncated.
//
// edit applies exact-string replacements in order, each to the result of
// the ones before: an old text must occur exactly once unless replace_all,
// and an edit that matches nothing or too much is a 409 naming it (with a
// hint: changed by an earlier edit, line endings, whitespace). The file is
// replaced once, keeping its mode, or not at all. Symlinks are refused
// (409) rather than replaced by a file: name the file they point to.
//
// patch takes a unified diff (git's, with renames, copies, new and
// deleted files and modes, or the traditional ---/+++ form) of regular
// text files. Names are relative to dir (default /) after dropping strip
// components (default: git's a/ and b/). Every hunk is checked against
// the current content before anything is written; then each new content
// goes to a temp file, and only when all are staged are they renamed into
// place (and deleted files removed). If a rename fails midway the files
// already replaced get their old content back. A hunk that does not apply
// is a 409 naming the file and the hunk, and nothing changes.
//
// # Background processes
//
// /v1/processes starts a command (argv or command, cwd, env, as exec)
// detached from the request: in a process group of its own, stdin
// /dev/null, stdout and stderr appended to one file in --state-dir, and
// bound to the agent's lifetime instead of the client's, so it keeps
// running when the client disconnects. Its output is read by byte offset
// while and after it runs. When it ends the agent records its exit code
// (128+N for signal N), the end time, and the CPU time from the kernel's
// rusage (user plus system, null where not measured). An opaque tag is
// echoed for the caller's bookkeeping. The agent keeps the 256 most recent
// ended processes. Shutdown sends SIGTERM to running ones; Close kills
// them.
//
// # Reaping
//
// As PID 1 of a PID namespace the agent reaps orphans on SIGCHLD. It scans
// /proc for zombie children instead of calling wait(-1), which would steal
// the exit status of the commands it runs itself.
package agent
