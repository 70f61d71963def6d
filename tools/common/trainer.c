/* Shared pieces of the bundled trainers (see trainer.h). */
#include "tools/common/trainer.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ds_status tr_check_input_file(const char *flag, const char *path) {
    struct stat s;
    if (stat(path, &s) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: %s", flag, path,
                      errno == ENOENT ? "no such file" : strerror(errno));
    /* A folder reads as "read error" deep in stdio; say what it is. */
    if (S_ISDIR(s.st_mode))
        return DS_ERR(DS_ERR_DATA, "%s %s: is a folder, not a file (give the data file itself)",
                      flag, path);
    if (access(path, R_OK) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: not readable: %s", flag, path, strerror(errno));
    return DS_OK;
}
