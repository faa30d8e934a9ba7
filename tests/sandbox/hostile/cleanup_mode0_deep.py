# why: leave folders of mode 0, folders without write permission and a tree nested past PATH_MAX in the workspace, so that cleanup fails and the run returns no result
# expect: max_wall_s=15
# limits: timeout_s=20
import os

os.makedirs("working/a/b/c")
with open("working/a/b/c/f", "w") as f:
    f.write("x")
os.chmod("working/a/b", 0)
os.chmod("working/a", 0o500)
fd = os.open("tmp", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(40):  # 40 x 200 characters: past PATH_MAX, within the disk walk's depth
    os.mkdir("d" * 200, dir_fd=fd)
    inner = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = inner
os.fchmod(fd, 0)
os.close(fd)
os.chmod("working", 0o500)
os.chmod(".", 0o500)
print("left a mess")
