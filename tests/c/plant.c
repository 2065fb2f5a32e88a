/* A hostile peer of a recording: connects to the session's socket (as `cuflight record` names it) and sends
 * what a stranger or a broken agent might. Usage: plant UID MODE, with CUFLIGHT_SESSION set (inherited from
 * the recorded program). MODE: "sealed" (a sealed 64 KiB memfd of zeros, as an agent would send), "unsealed"
 * (a plain memfd that could be truncated under the collector), "garbage" (a header of 0xff bytes), "three"
 * (three descriptors), "silent" (connects and sends nothing). Exits 0 once it has sent. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int memfd(int sealed, int fill) {
    int fd = memfd_create("plant", MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, 65536) != 0) exit(20);
    if (fill) {
        char buf[4096];
        memset(buf, fill, sizeof buf);
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) exit(21);
    }
    if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) exit(22);
    return fd;
}

int main(int argc, char **argv) {
    const char *session = getenv("CUFLIGHT_SESSION");
    if (argc < 3 || !session) return 2;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "cuflight/%s/%s", argv[1], session);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&addr, sizeof(sa_family_t) + 1 + n) != 0) {
        perror("plant: connect");
        return 3;
    }
    const char *mode = argv[2];
    if (!strcmp(mode, "silent")) {
        sleep(1);
        return 0;
    }
    int fds[3] = {memfd(strcmp(mode, "unsealed") != 0, !strcmp(mode, "garbage") ? 0xff : 0), -1, -1};
    int nfds = 1;
    if (!strcmp(mode, "three")) {
        fds[1] = memfd(1, 0);
        fds[2] = memfd(1, 0);
        nfds = 3;
    }
    char payload[16] = "CUFLCHN1";
    struct iovec iov = {payload, sizeof payload};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof fds)];
    } c;
    memset(&c, 0, sizeof c);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    if (sendmsg(s, &msg, 0) != (ssize_t)sizeof payload) {
        perror("plant: sendmsg");
        return 4;
    }
    return 0;
}
