"""The grading worker: claims jobs, runs learner code in bubblewrap, grades it on trusted ground.

Never imports FastAPI. Imports torch only for trusted grading in the worker process itself
(CPU only: CUDA is initialised solely inside sandboxed job processes).
"""
