/*
 * drums-userns: the host operations a per-session user namespace needs
 * that no tool on a Debian 12 host does (util-linux's X-mount.idmap came in
 * 2.39, runc's idmapped mounts in 1.2) and Node cannot do itself (a
 * multi-threaded process cannot unshare a user namespace, and Node has no
 * binding for the mount API), and the peer check of the daemon's connections
 * into a session (Node has no SO_PEERPIDFD). Built by scripts/setup.sh; see
 * docs/security.md.
 *
 *   drums-userns ns BASE COUNT USERNS_PIN NETNS_PIN
 *       A user namespace mapping 0..COUNT-1 to host BASE..BASE+COUNT-1, created
 *       by host uid BASE (so the kernel's per-user counts of everything inside
 *       it roll up to BASE, not to root), and a network namespace owned by it.
 *       Both are pinned by bind mounts on USERNS_PIN and NETNS_PIN (files this
 *       creates; NETNS_PIN is normally /run/netns/NAME, as `ip netns` keeps them).
 *   drums-userns idmap USERNS_PIN SOURCE TARGET
 *       A read-only, nodev, nosuid idmapped bind mount of SOURCE on TARGET
 *       (an existing directory), mapped through the user namespace at USERNS_PIN.
 *   drums-userns shift DIR FROM TO COUNT
 *       Every file under DIR (not following symlinks, not crossing mounts)
 *       owned by FROM+k (k < COUNT) becomes owned by TO+k; group likewise.
 *   drums-userns connect UID GID DIR NAME
 *       A unix stream socket connected, as host UID/GID with no supplementary
 *       groups, to NAME (a relative path, no `..`) under DIR. DIR is opened as
 *       the caller; everything under it is resolved as UID, so a symlink the
 *       session planted reaches only what UID may. The socket's peer
 *       credentials are UID/GID, which a server inside the session's user
 *       namespace sees as the mapped in-session ids. The connected descriptor
 *       goes to the parent over a Node IPC channel (NODE_CHANNEL_FD) as one
 *       `net.Socket` handle message; see connectAs in src/host/userns.ts.
 *   drums-userns peer CGROUP
 *       Whether the unix socket on descriptor 3 (connected by the caller) is
 *       served by a process of cgroup CGROUP (a path like /drums-x/ID, or a
 *       cgroup below it) in any hierarchy: exit 0 if so, else a reason and
 *       exit 1. The peer is the process that called listen(), taken from the
 *       kernel as a pidfd (SO_PEERPIDFD), so a pid that exits and is reused
 *       while this runs cannot pass: the pidfd must still be alive after its
 *       cgroup was read. See checkPeer in src/host/peer.ts.
 *
 * Exit 0 on success; otherwise a one-line reason on stderr and exit 1, with
 * nothing left behind by `ns` (pins unmounted and removed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

struct drums_mount_attr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};

static int fail(const char *what) {
  fprintf(stderr, "drums-userns: %s: %s\n", what, strerror(errno));
  return 1;
}

static int parse_id(const char *s, unsigned long max, unsigned long *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || !*s || *end || v > max) {
    fprintf(stderr, "drums-userns: bad number '%s'\n", s);
    return -1;
  }
  *out = v;
  return 0;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int saved = errno;
  close(fd);
  errno = saved;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A bind mount of an nsfs file on a new file `pin` (made here, O_EXCL). */
static int pin_ns(const char *nsfile, const char *pin) {
  int fd = open(pin, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0) return -1;
  close(fd);
  if (mount(nsfile, pin, NULL, MS_BIND, NULL) < 0) {
    int saved = errno;
    unlink(pin);
    errno = saved;
    return -1;
  }
  return 0;
}

static void unpin(const char *pin) {
  umount2(pin, MNT_DETACH);
  unlink(pin);
}

/* `ip netns` keeps its pins under a shared mount of /run/netns (so other mount namespaces see them): do the same. */
static void prepare_netns_dir(const char *pin) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", pin);
  char *slash = strrchr(dir, '/');
  if (!slash || strcmp(slash, "/") == 0) return;
  *slash = 0;
  if (strcmp(dir, "/run/netns") != 0 && strcmp(dir, "/var/run/netns") != 0) return;
  mkdir(dir, 0755);
  if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) == 0) return;
  if (errno != EINVAL) return;
  if (mount(dir, dir, "none", MS_BIND | MS_REC, NULL) == 0) mount("", dir, "none", MS_SHARED | MS_REC, NULL);
}

static int cmd_ns(unsigned long base, unsigned long count, const char *userns_pin, const char *netns_pin) {
  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) return fail("pipe");
  pid_t pid = fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    char c = 0;
    /* The namespace's owner is the session's own host uid: its per-user counts (inotify, nproc...) roll up there. */
    if (setgroups(0, NULL) < 0 || setresgid(base, base, base) < 0 || setresuid(base, base, base) < 0) _exit(10);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0) _exit(11);
    if (write(ready[1], &c, 1) != 1) _exit(12);
    /* Wait until the parent has written the maps and pinned both namespaces (it closes `go`). */
    while (read(go[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  ssize_t n;
  while ((n = read(ready[0], &c, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) {
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    fprintf(stderr, "drums-userns: the child could not %s (exit %d)\n", code == 11 ? "unshare a user and network namespace" : "drop to the session's uid", code);
    return 1;
  }
  char path[64], map[96];
  int rc = 1;
  int pinned_user = 0, pinned_net = 0;
  snprintf(map, sizeof map, "0 %lu %lu\n", base, count);
  snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
  if (write_file(path, map) < 0) {
    fail("uid_map");
    goto out;
  }
  snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
  if (write_file(path, map) < 0) {
    fail("gid_map");
    goto out;
  }
  snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  if (pin_ns(path, userns_pin) < 0) {
    fail(userns_pin);
    goto out;
  }
  pinned_user = 1;
  prepare_netns_dir(netns_pin);
  snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
  if (pin_ns(path, netns_pin) < 0) {
    fail(netns_pin);
    goto out;
  }
  pinned_net = 1;
  rc = 0;
out:
  close(go[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (rc != 0) {
    if (pinned_net) unpin(netns_pin);
    if (pinned_user) unpin(userns_pin);
  }
  return rc;
}

static int cmd_idmap(const char *userns_pin, const char *source, const char *target) {
  int userns = open(userns_pin, O_RDONLY | O_CLOEXEC);
  if (userns < 0) return fail(userns_pin);
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | O_CLOEXEC);
  if (tree < 0) return fail("open_tree");
  struct drums_mount_attr attr = {
      .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID,
      .userns_fd = (uint64_t)userns,
  };
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) return fail("mount_setattr(MOUNT_ATTR_IDMAP)");
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) return fail("move_mount");
  return 0;
}

static unsigned long shift_from, shift_to, shift_count;
static dev_t shift_dev;
static int shift_errors;

static int shift_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag;
  (void)ftw;
  if (st->st_dev != shift_dev) return FTW_SKIP_SUBTREE;
  uid_t uid = st->st_uid;
  gid_t gid = st->st_gid;
  int change = 0;
  if (uid >= shift_from && uid - shift_from < shift_count) uid = uid - shift_from + shift_to, change = 1;
  if (gid >= shift_from && gid - shift_from < shift_count) gid = gid - shift_from + shift_to, change = 1;
  if (!change) return FTW_CONTINUE;
  /* lchown clears set-id bits: put the mode back (not for symlinks, which have none). */
  if (lchown(path, uid, gid) < 0 || (!S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) && chmod(path, st->st_mode & 07777) < 0)) {
    fprintf(stderr, "drums-userns: shift %s: %s\n", path, strerror(errno));
    shift_errors++;
  }
  return FTW_CONTINUE;
}

static int cmd_shift(const char *dir, unsigned long from, unsigned long to, unsigned long count) {
  struct stat st;
  if (lstat(dir, &st) < 0) return fail(dir);
  shift_from = from, shift_to = to, shift_count = count, shift_dev = st.st_dev;
  if (nftw(dir, shift_one, 64, FTW_PHYS | FTW_MOUNT | FTW_ACTIONRETVAL) < 0) return fail("nftw");
  return shift_errors ? 1 : 0;
}

/* Node's IPC channel: a JSON line, with SCM_RIGHTS on it, that `child.on('message', (msg, handle))` receives as a net.Socket. */
static int send_handle(int channel, int fd) {
  static const char line[] = "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Socket\",\"msg\":{\"drums\":\"connected\"}}\n";
  char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof control);
  struct iovec iov = {.iov_base = (void *)line, .iov_len = sizeof line - 1};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  ssize_t n;
  while ((n = sendmsg(channel, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  return n == (ssize_t)(sizeof line - 1) ? 0 : -1;
}

static int cmd_connect(unsigned long uid, unsigned long gid, const char *dir, const char *name) {
  const char *env = getenv("NODE_CHANNEL_FD");
  unsigned long channel;
  if (!env || parse_id(env, INT_MAX, &channel)) {
    fprintf(stderr, "drums-userns: connect needs a Node IPC channel (NODE_CHANNEL_FD)\n");
    return 2;
  }
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (!*name || name[0] == '/' || strlen(name) >= sizeof sa.sun_path || strcmp(name, "..") == 0 || strncmp(name, "../", 3) == 0 ||
      strstr(name, "/../") || (strlen(name) >= 3 && strcmp(name + strlen(name) - 3, "/..") == 0)) {
    fprintf(stderr, "drums-userns: connect: '%s' is not a short relative path without '..'\n", name);
    return 2;
  }
  memcpy(sa.sun_path, name, strlen(name) + 1);
  int d = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return fail(dir);
  if (fchdir(d) < 0) return fail("fchdir");
  close(d);
  if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) return fail("drop to the session's uid");
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail("socket");
  int r;
  while ((r = connect(s, (struct sockaddr *)&sa, sizeof sa)) < 0 && errno == EINTR) {
  }
  if (r < 0) return fail(name);
  if (send_handle((int)channel, s) < 0) return fail("send the socket to the daemon");
  return 0;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The pid a pidfd names in our pid namespace (its fdinfo), or -1 once the process is gone. */
static long pidfd_pid(int pidfd) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  long pid = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "Pid:", 4) == 0) pid = strtol(line + 4, NULL, 10);
  fclose(f);
  return pid > 0 ? pid : -1;
}

/* Whether /proc/PID/cgroup puts the process at CGROUP or below it in some hierarchy. */
static int in_cgroup(long pid, const char *cgroup) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%ld/cgroup", pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = strlen(cgroup);
  int hit = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *p = strchr(line, ':');
    p = p ? strchr(p + 1, ':') : NULL;
    if (p && strncmp(p + 1, cgroup, n) == 0 && (p[1 + n] == 0 || p[1 + n] == '/')) hit = 1;
  }
  fclose(f);
  return hit;
}

static int cmd_peer(const char *cgroup) {
  if (cgroup[0] != '/' || strlen(cgroup) < 2 || strstr(cgroup, "/../") || cgroup[strlen(cgroup) - 1] == '/') {
    fprintf(stderr, "drums-userns: peer: '%s' is not a cgroup path\n", cgroup);
    return 2;
  }
  int pidfd = -1;
  socklen_t len = sizeof pidfd;
  if (getsockopt(3, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0 || pidfd < 0) {
    fprintf(stderr, "drums-userns: peer: no live peer process on the socket: %s\n", strerror(errno));
    return 1;
  }
  long pid = pidfd_pid(pidfd);
  int ok = pid > 0 && in_cgroup(pid, cgroup);
  /* The pid was read through /proc: it counts only if the pidfd's process is still the one behind it. */
  if (ok && pidfd_pid(pidfd) != pid) ok = 0;
  if (!ok) {
    fprintf(stderr, "drums-userns: peer: the socket is served by a process outside %s (pid %ld)\n", cgroup, pid);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  unsigned long a, b, c;
  const unsigned long max_id = 4294967294UL;
  if (argc == 6 && strcmp(argv[1], "ns") == 0) {
    if (parse_id(argv[2], max_id, &a) || parse_id(argv[3], 65536, &b) || b == 0 || a + b > max_id) return 2;
    return cmd_ns(a, b, argv[4], argv[5]);
  }
  if (argc == 5 && strcmp(argv[1], "idmap") == 0) return cmd_idmap(argv[2], argv[3], argv[4]);
  if (argc == 6 && strcmp(argv[1], "shift") == 0) {
    if (parse_id(argv[3], max_id, &a) || parse_id(argv[4], max_id, &b) || parse_id(argv[5], 65536, &c) || a + c > max_id || b + c > max_id) return 2;
    return cmd_shift(argv[2], a, b, c);
  }
  if (argc == 6 && strcmp(argv[1], "connect") == 0) {
    if (parse_id(argv[2], max_id, &a) || parse_id(argv[3], max_id, &b)) return 2;
    return cmd_connect(a, b, argv[4], argv[5]);
  }
  if (argc == 3 && strcmp(argv[1], "peer") == 0) return cmd_peer(argv[2]);
  fprintf(stderr,
          "usage: drums-userns ns BASE COUNT USERNS_PIN NETNS_PIN\n"
          "       drums-userns idmap USERNS_PIN SOURCE TARGET\n"
          "       drums-userns shift DIR FROM TO COUNT\n"
          "       drums-userns connect UID GID DIR NAME\n"
          "       drums-userns peer CGROUP\n");
  return 2;
}
