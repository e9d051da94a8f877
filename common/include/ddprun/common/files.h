#pragma once
// Files and folders. Failures throw std::system_error naming the call and the path.

#include <cstddef>
#include <string>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

// Creates `dir` and its missing parents; what it creates gets exactly `mode`, whatever the
// umask. Throws when a component cannot be created or `dir` is not a folder.
void make_directories(const std::string& dir, unsigned mode = 0700);

// What a check of a folder found.
struct FolderCheck {
  // Empty when the folder is private; else what does not hold, as a sentence's subject and
  // verb: "/tmp/x belongs to user id 65534, not to you", "/tmp/x is a link, not a folder".
  std::string problem;
  // Whether this user may remove what is at the path (root; else write access to the parent
  // folder, and no sticky bit there that keeps another user's entry; a folder's content
  // writable too): the hint "remove it" is true only then.
  bool removable = false;
  // Owner of what is at the path.
  unsigned owner = 0;
  // This user's folder, not a link, whose only fault is its mode: chmod 700 mends it.
  bool only_mode = false;
  bool ok() const { return problem.empty(); }
};

// Checks, never following a link, that `dir` is a private folder of the effective user: a
// folder (not a link), owned by it, with no permission bits for group or others.
FolderCheck check_private_directory(const std::string& dir);

// Creates `dir` (0700; missing parents as make_directories does) unless something is there
// already, then checks it (check_private_directory). Throws std::system_error when it
// cannot be created.
FolderCheck make_private_directory(const std::string& dir);

// A new folder named `prefix` and six random characters (mkdtemp: a name nobody chose
// before, mode 0700, this user's). Throws std::system_error ("mkdtemp PATTERN").
std::string make_temp_directory(const std::string& prefix);

// Opens `path` to append to it, creating it 0600 when missing, for per-rank files in a
// folder that may be shared: never through a link (O_NOFOLLOW), never waiting on a FIFO,
// and only a regular file owned by this user. Throws std::system_error ("open PATH"; ELOOP
// for a link, EPERM for a file of another user or not a regular file).
UniqueFd open_own_file_for_append(const std::string& path);

// The whole content of the file at `path`. Throws std::system_error ("open PATH",
// "read PATH").
std::string read_file(const std::string& path);

// Writes `text` to a new file at `path` (0600; an existing file, a link or a FIFO there is an
// error, so nothing of someone else's is overwritten or followed). Throws std::system_error ("open
// PATH", "write PATH").
void write_new_file(const std::string& path, const std::string& text);

// Replaces the file at `path` with `text` all at once, so a reader finds the old content
// or the new, never a part: the text goes to a new file of a random name beside it
// (mkostemp: O_EXCL, so never through a link planted there; 0600), is flushed to the disk
// (fsync), then renamed over `path` (a link at `path` is replaced, not followed), and the
// folder is flushed too. Throws std::system_error ("open PATH", "write PATH", "fsync PATH",
// "rename PATH"); the new file is removed then, and `path` is as it was.
void replace_file(const std::string& path, const std::string& text);

// At most `max_bytes` from the start of the file at `path`; empty when it cannot be read,
// and when it is a link, not a regular file, or not owned by this user (a file planted in a
// shared folder is no answer). For small files whose absence is an answer: error files,
// progress files, stack dumps.
std::string read_file_head(const std::string& path, std::size_t max_bytes = 64 * 1024);

// As read_file_head, whoever owns the file: for /proc entries of any process.
std::string read_any_file_head(const std::string& path, std::size_t max_bytes = 64 * 1024);

}  // namespace ddprun
