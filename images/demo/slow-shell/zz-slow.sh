# envcheck demo defect (slow-shell): every login shell takes ~4 s to be ready.
sleep 4
