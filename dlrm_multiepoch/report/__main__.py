from dlrm_multiepoch.report.compare import main

main()
